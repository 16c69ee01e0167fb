# The smoke-test trainer image: `python -m spotproof.smoke.train`, the container the
# smoke Job runs (README, "The trainer image").
#
# The base is PyTorch's own CUDA runtime image, pinned by tag and digest, so every build
# gets the same torch (2.13.0+cu126), CUDA 12.6 and cuDNN 9. Its Python is the system
# Python 3.12, marked externally managed (PEP 668); torch was installed into it with pip,
# and spotproof goes next to it the same way. spotproof asks for torch>=2.4, which the
# base satisfies, so pip keeps the CUDA build instead of fetching another.
FROM pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime@sha256:6acf597eeb8e376a96580dde4952f37cc017fef732bb40bfc73f28f25e3f64b4

# The one object store the image talks to: gcs (GKE), s3 (EKS) or azure-blob (AKS); and
# the same cloud's work queue for batch workers: batch-gcp, batch-aws or batch-azure.
ARG STORE=gcs
ARG QUEUE=batch-gcp

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/spotproof
COPY pyproject.toml README.md LICENSE constraints.txt ./
COPY components ./components
# Versions come from constraints.txt, the set the tests ran with. `pip check` fails the build
# on a conflict; the last line fails it if torch lost its CUDA.
RUN pip install --break-system-packages --constraint constraints.txt ".[train,metrics,${STORE},${QUEUE}]" \
    && pip check \
    && python -c "import torch, spotproof.smoke.train; assert torch.version.cuda, 'no CUDA torch'"

# The Job runs as 10001 (above the node's own UIDs) with a read-only root filesystem; /tmp
# is an emptyDir. Batch workers run the same image with their own command
# (python -m spotproof.runtime.batch <package.module:work>).
USER 10001:10001
ENTRYPOINT ["python", "-m", "spotproof.smoke.train"]
