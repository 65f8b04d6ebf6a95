# lastword as a container: the service on SQLite (a volume at /data) by default, or on
# PostgreSQL when LASTWORD_DATABASE_URL says postgresql://… (see docker-compose.yml).
#
# BASE is any image with Python 3.11 as `python3` and the venv module: python:3.11-slim for
# users, a Debian bookworm stand-in in CI (.ci/container-base). Nothing here relies on where the
# base keeps its Python: everything is installed into a virtual environment under /opt.
ARG BASE=python:3.11-slim
FROM ${BASE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/lastword \
    PATH=/opt/lastword/bin:$PATH

# Dependencies first, from the lock file alone: this layer is rebuilt only when they change,
# not on every edit of the source. Every pin carries its hashes (--require-hashes), so the
# image gets exactly the files the lock names; setuptools is pinned there too, for the package
# install below, which then needs nothing from the network.
COPY requirements.lock /opt/lastword-requirements.lock
RUN python3 -m venv "$VIRTUAL_ENV" \
    && pip install --require-hashes --only-binary :all: -r /opt/lastword-requirements.lock

# A user without privileges, owning only the data volume.
RUN useradd --no-log-init --uid 10001 --user-group --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin lastword \
    && mkdir /data \
    && chown 10001:10001 /data

# The source last: a source-only change rebuilds only from here.
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
RUN pip install --no-deps --no-build-isolation --no-index . \
    && rm -rf /src/build

ENV LASTWORD_DATABASE_URL=sqlite:////data/lastword.db \
    LASTWORD_HOST=0.0.0.0 \
    LASTWORD_PORT=8000

VOLUME ["/data"]
WORKDIR /data
USER 10001:10001
EXPOSE 8000

# Readiness (/readyz: the store answers, the replica is not draining), in the image's own Python
# (the venv's, first on PATH); honours a changed LASTWORD_PORT.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as r; r.urlopen('http://127.0.0.1:%s/readyz' % os.environ.get('LASTWORD_PORT', '8000'), timeout=2)"]

# Exec form: lastword is PID 1 and gets the SIGTERM of `docker stop` itself, then drains (its
# streams told to reconnect, its requests finished, within LASTWORD_DRAIN_SECONDS), closes the
# database, and exits 0. Give `docker stop` longer than the drain (`-t 15`).
STOPSIGNAL SIGTERM
CMD ["lastword", "serve"]
