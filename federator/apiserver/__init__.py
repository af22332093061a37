"""federator.apiserver"""
