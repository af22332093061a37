"""federator.clusters"""
