# lastword as a container: the service on SQLite (a volume at /data) by default, or on
# PostgreSQL when LASTWORD_DATABASE_URL says postgresql://… (see docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Dependencies first, from pyproject.toml alone: this layer is rebuilt only when they change,
# not on every edit of the source.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > requirements.txt \
    && pip install -r requirements.txt

# A user without privileges, owning only the data volume.
RUN useradd --system --uid 10001 --no-create-home --home-dir /nonexistent lastword \
    && mkdir /data \
    && chown lastword /data

COPY app ./app
ENV PYTHONPATH=/app/app

ENV LASTWORD_DATABASE_URL=sqlite:////data/lastword.db \
    LASTWORD_HOST=0.0.0.0 \
    LASTWORD_PORT=8000

VOLUME ["/data"]
USER lastword
EXPOSE 8000

HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as r; r.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('LASTWORD_PORT', '8000'), timeout=2)"]

CMD ["python", "-m", "lastword.cli", "serve"]
