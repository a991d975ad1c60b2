# The durable-agent worker image (used by docker-compose.yml).
#
# It runs `durable-agent worker`; everything is configured through the environment:
#   DURABLE_AGENT_APP         module:attr of the App to serve (default: the demo app)
#   DURABLE_AGENT_STORE       file:PATH or mongodb://... (else MONGODB_URI)
#   DURABLE_AGENT_TASK_QUEUE  task queue to poll (default: durable-agent)
#   TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TLS (see the README)
#   OPENAI_API_KEY / OPENAI_BASE_URL / ANTHROPIC_API_KEY / DURABLE_AGENT_MODEL (demo app model)
# To serve your own agents, build FROM this image, COPY your package in, set DURABLE_AGENT_APP.
FROM python:3.11.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/durable-agent
COPY pyproject.toml README.md requirements-dev.txt ./
COPY src ./src
# the `temporal` extra is the SDK only (server binaries are in `dev`): the worker needs no servers.
# requirements-dev.txt is the project's lock (the full freeze the tests ran with): as constraints
# it pins every package the extras pull in, to the tested version, and installs nothing else.
RUN pip install --constraint requirements-dev.txt ".[temporal,mongo,cli,openai,anthropic]" \
    && useradd --create-home --uid 10001 agent

USER agent
WORKDIR /home/agent
ENV DURABLE_AGENT_APP=durable_agent.cli.demo_app:app \
    DURABLE_AGENT_TASK_QUEUE=durable-agent \
    DURABLE_AGENT_DATA_DIR=/home/agent/data

ENTRYPOINT ["durable-agent"]
CMD ["worker", "--ready-file", "/tmp/durable-agent-worker.ready"]
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["durable-agent", "worker", "--check", "--ready-file", "/tmp/durable-agent-worker.ready"]
