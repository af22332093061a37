"""Development-only pieces: self-signed certificates and kubeconfigs for the
hub (`certs`), and the member clusters `federator up` starts beside it
(`clusters`). Nothing a production hub runs imports this package except to
write dev-mode TLS material when asked.
"""
