"""federator.sim"""
