"""federator.placement"""
