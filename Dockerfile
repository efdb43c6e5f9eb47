# The Pilotfish image: one image for every component, chosen by the CLI command it runs
# (`pilotfish matcher --no-beat`, `pilotfish director`, `pilotfish pilot --queue ID`, ...), as the Helm
# chart helm/pilotfish does. Flower runs from the same image with `celery ... flower`.
#
# No redis-tools: the Pilotfish probes use `pilotfish health` (Python), and the Redis pod checks itself
# with the redis-cli of the Redis image.

# --- build: turn the source and every dependency into wheels, so the runtime stage needs no compiler
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY taskqueues/ taskqueues/
COPY matcher/ matcher/
COPY pilot/ pilot/
RUN pip wheel --no-cache-dir --wheel-dir /wheels . "flower>=2"

# --- runtime
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PILOTFISH_STATE_DIR=/var/lib/pilotfish
# The chart runs every container as 10001 with a read-only root filesystem; the same user here makes a
# plain `docker run` behave the same way. The state dir is where beat's schedule and a pilot's work go.
# bubblewrap: pilots run each payload in its own namespaces (payload_sandbox = "bwrap", the default).
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 pilotfish \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/pilotfish --create-home \
       --shell /usr/sbin/nologin pilotfish \
    && mkdir -p /etc/pilotfish
COPY --from=build /wheels /wheels
RUN pip install --no-index --find-links=/wheels pilotfish flower && rm -rf /wheels
USER 10001:10001
WORKDIR /var/lib/pilotfish
ENTRYPOINT ["pilotfish"]
CMD ["--help"]
