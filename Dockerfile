# The smoke-test trainer image: `python -m spotproof.smoke.train` (see DESIGN.md, "Interfaces").
# The default torch wheel on Linux carries CUDA, so the same image runs on GPU nodes.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /opt/spotproof
COPY pyproject.toml README.md ./
COPY components ./components
RUN pip install '.[train,gcs,s3,azure-blob]'

# The Job runs as 1000 with a read-only root filesystem; /tmp is an emptyDir.
USER 1000:1000
ENTRYPOINT ["python", "-m", "spotproof.smoke.train"]
