"""federator.delegation"""
