# The reward-operator image: the operator, the reward gateway that it renders as each
# InferenceService's transformer (`python -m reward_gateway`), and the batch worker a
# RewardBatch's Job runs (`reward-gateway-client score`, from clients/python, with its s3
# and parquet extras for s3:// and Parquet datasets), one image.
#   docker build -t reward-operator:0.1.0 .
# Runs as UID 65532 with a read-only root filesystem (the chart mounts /tmp).
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
COPY runtimes/gateway/reward_gateway ./runtimes/gateway/reward_gateway
COPY clients/python ./clients/python
RUN python -m venv /opt/reward-operator \
 && /opt/reward-operator/bin/pip install --no-cache-dir --no-compile ".[gateway]" "./clients/python[s3,parquet]" \
 && /opt/reward-operator/bin/python -m compileall -q /opt/reward-operator/lib

FROM ${PYTHON_IMAGE}
COPY --from=build /opt/reward-operator /opt/reward-operator
ENV PATH=/opt/reward-operator/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
# 8080: Prometheus metrics, 8081: liveness (/healthz)
EXPOSE 8080 8081
ENTRYPOINT ["reward-operator"]
CMD ["run", "--standalone", "--all-namespaces"]
