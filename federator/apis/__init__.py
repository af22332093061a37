"""federator.apis"""
