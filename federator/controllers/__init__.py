"""federator.controllers"""
