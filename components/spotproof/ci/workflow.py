"""The GitHub Actions workflow ``spotproof ci init`` writes into a user's repository.

What it holds, and why:

- **One plan job per stack**, each installing only that stack's extra (``gcp``, ``aws``,
  ``azure``): an AKS stack never runs where only the GCP SDK is installed. The list comes
  from a first job that installs the bare package and PyYAML (seconds) and reads the stack
  files (``spotproof ci stacks``), so a stack added later is planned without editing the
  workflow (one of a cloud the locks lack needs ``ci init`` again).
- **Every install verified by hash** (``pip install --require-hashes -r``): spotproof is the
  artifact the user chose (``ci.artifact``), its dependencies what ``ci.lock`` resolved,
  each file by its sha256, never a name from the index alone. A build from a commit or the
  checkout follows the lock with ``--no-deps --no-build-isolation``: pinned by the commit,
  nothing fetched but it. The user's own ``requirements.txt`` beside the project is
  installed as they wrote it, and Node.js (for Karpenter's bundled schemas) comes from
  ``actions/setup-node``.
- **Third-party actions pinned by commit**, the tag beside it in a comment (GitHub's
  security hardening guide: "Pin actions to a full length commit SHA",
  https://docs.github.com/actions/security-for-github-actions/security-guides/security-hardening-for-github-actions);
  each commit below was read from the action's repository at that tag.
- **pip's cache** keyed on the locks; pip checks each cached file's hash as it installs it.
- **No expression inside a script**: matrix values reach ``run:`` steps as environment
  variables, since a stack file's name comes from the pull request
  (https://docs.github.com/actions/security-for-github-actions/security-guides/security-hardening-for-github-actions#understanding-the-risk-of-script-injections).
- **A preview job** (``pulumi preview`` with the installed CrossGuard pack) where the
  repository variable ``SPOTPROOF_PREVIEW`` is ``"true"`` and the pull request comes from
  the repository itself: GitHub withholds secrets and OIDC tokens from forks.
"""

from __future__ import annotations

from spotproof.ci import actions
from spotproof.ci.artifact import HOME, Choice
from spotproof.ci.lock import RUNNER_PYTHON, path_of

PYTHON_VERSION = RUNNER_PYTHON
NODE_VERSION = "22"
WORKFLOW_PATH = ".github/workflows/spotproof.yml"


_TEMPLATE = """\
# Plans every stack of this Pulumi project offline on each pull request, and previews it
# for real where credentials exist. Written by `spotproof ci init --spotproof @CHOICE@`.
#
# Every job installs spotproof and its dependencies from the locks in @HOME@/,
# each file by its sha256 (pip install --require-hashes), never by a name from the index
# alone: run `spotproof ci init --force --spotproof ...` again to update them.
@SOURCE_NOTE@#
# - `plan` runs on every pull request, forks included: `spotproof plan` needs no cloud
#   credentials. One job per stack, with only that stack's extra installed; findings
#   become annotations on the stack file's lines and a job summary.
# - `preview` runs `pulumi preview` with spotproof's CrossGuard pack, once per stack, when
#   the pull request comes from this repository and the repository variable
#   SPOTPROOF_PREVIEW is "true". Clouds are reached through OIDC only (no stored keys).
#
# Repository variables (Settings > Secrets and variables > Actions > Variables):
#   SPOTPROOF_PREVIEW                 "true" to run `preview`
#   PULUMI_ORGANIZATION               Pulumi Cloud organization (OIDC token exchange), or
#   PULUMI_BACKEND_URL                a self-managed backend instead (gs://..., s3://..., azblob://...)
#   GCP_WORKLOAD_IDENTITY_PROVIDER    the provider's full name
#                                     (projects/NUMBER/locations/global/workloadIdentityPools/...)
#   GCP_SERVICE_ACCOUNT               the service account the provider may impersonate
#   AWS_ROLE_ARN, AWS_REGION          the role GitHub's OIDC token may assume
#   AZURE_CLIENT_ID, AZURE_TENANT_ID, AZURE_SUBSCRIPTION_ID   an app with a federated credential
# Secret, only for stacks encrypted with the passphrase provider: PULUMI_CONFIG_PASSPHRASE.
name: spotproof

on:
  pull_request:

permissions:
  contents: read

concurrency:
  group: spotproof-${{ github.event.pull_request.number }}
  cancel-in-progress: true

env:
  PIP_DISABLE_PIP_VERSION_CHECK: "1"

defaults:
  run:
    working-directory: @WORKDIR@

jobs:
  stacks:
    name: list stacks
    runs-on: ubuntu-latest
    timeout-minutes: 10
    outputs:
      stacks: ${{ steps.list.outputs.stacks }}
    steps:
      - uses: @CHECKOUT@
        with:
          persist-credentials: false
      - uses: @SETUP_PYTHON@
        with:
          python-version: "@PYTHON@"
          cache: pip
          cache-dependency-path: @LOCKS@
      - id: list
        name: Stacks and the extra each needs
        run: |
@INSTALL_STACKS@
          echo "stacks=$(spotproof ci stacks)" >> "$GITHUB_OUTPUT"

  plan:
    name: spotproof plan ${{ matrix.stack }}
    needs: stacks
    if: needs.stacks.outputs.stacks != '[]'
    runs-on: ubuntu-latest
    timeout-minutes: 20
    strategy:
      fail-fast: false
      matrix:
        include: ${{ fromJSON(needs.stacks.outputs.stacks) }}
    env:
      STACK: ${{ matrix.stack }}
      EXTRA: ${{ matrix.extra }}
    steps:
      - uses: @CHECKOUT@
        with:
          persist-credentials: false
      - uses: @SETUP_PYTHON@
        with:
          python-version: "@PYTHON@"
          cache: pip
          cache-dependency-path: @LOCKS@
      - uses: @SETUP_NODE@
        with:
          node-version: "@NODE@"
@SCHEMAS_STEP@      - name: Install spotproof and the program's requirements
        run: |
@INSTALL_PLAN@
          if [ -f requirements.txt ]; then python -m pip install -r requirements.txt; fi
      - name: Plan
        # --format github: ::error annotations at the config line each finding came from,
        # and the Markdown tables appended to $GITHUB_STEP_SUMMARY.
        run: spotproof plan --stack "${STACK}" --format github

  preview:
    name: pulumi preview ${{ matrix.stack }}
    needs: stacks
    if: >-
      needs.stacks.outputs.stacks != '[]'
      && github.event.pull_request.head.repo.full_name == github.repository
      && vars.SPOTPROOF_PREVIEW == 'true'
    runs-on: ubuntu-latest
    timeout-minutes: 30
    permissions:
      contents: read
      id-token: write
      pull-requests: write
    strategy:
      fail-fast: false
      matrix:
        include: ${{ fromJSON(needs.stacks.outputs.stacks) }}
    env:
      STACK: ${{ matrix.stack }}
      EXTRA: ${{ matrix.extra }}
    steps:
      - uses: @CHECKOUT@
        with:
          persist-credentials: false
      - uses: @SETUP_PYTHON@
        with:
          python-version: "@PYTHON@"
          cache: pip
          cache-dependency-path: @LOCKS@
      # Two environments: pulumi-policy pins protobuf 5 while a GCP program needs 6. The
      # program runs in the virtualenv its Pulumi.yaml names (@VENV@), the CrossGuard
      # pack with the python on PATH.
      - name: Program environment
        run: |
          python -m venv @VENV@
@INSTALL_PROGRAM@
          if [ -f requirements.txt ]; then @VENV@/bin/python -m pip install -r requirements.txt; fi
      - id: pack
        name: CrossGuard pack environment
        run: |
@INSTALL_PACK@
          echo "dir=$(spotproof policy-pack)" >> "$GITHUB_OUTPUT"
      - name: GCP credentials (workload identity federation)
        if: matrix.cloud == 'gke'
        uses: @GCP_AUTH@
        with:
          workload_identity_provider: ${{ vars.GCP_WORKLOAD_IDENTITY_PROVIDER }}
          service_account: ${{ vars.GCP_SERVICE_ACCOUNT }}
      - name: AWS credentials (OIDC role)
        if: matrix.cloud == 'eks'
        uses: @AWS_CREDENTIALS@
        with:
          role-to-assume: ${{ vars.AWS_ROLE_ARN }}
          aws-region: ${{ vars.AWS_REGION }}
      - name: Azure credentials (federated)
        if: matrix.cloud == 'aks'
        uses: @AZURE_LOGIN@
        with:
          client-id: ${{ vars.AZURE_CLIENT_ID }}
          tenant-id: ${{ vars.AZURE_TENANT_ID }}
          subscription-id: ${{ vars.AZURE_SUBSCRIPTION_ID }}
      - name: Pulumi Cloud token (OIDC)
        if: vars.PULUMI_ORGANIZATION != ''
        uses: @PULUMI_AUTH@
        with:
          organization: ${{ vars.PULUMI_ORGANIZATION }}
          requested-token-type: urn:pulumi:token-type:access_token:organization
      - uses: @PULUMI@
        with:
          command: preview
          stack-name: ${{ matrix.stack }}
          work-dir: @WORKDIR@
          cloud-url: ${{ vars.PULUMI_BACKEND_URL }}
          policyPacks: ${{ steps.pack.outputs.dir }}
          comment-on-pr: true
        env:
          # azure-native reads these for OIDC (no client secret).
          ARM_USE_OIDC: ${{ matrix.cloud == 'aks' }}
          ARM_CLIENT_ID: ${{ vars.AZURE_CLIENT_ID }}
          ARM_TENANT_ID: ${{ vars.AZURE_TENANT_ID }}
          ARM_SUBSCRIPTION_ID: ${{ vars.AZURE_SUBSCRIPTION_ID }}
          PULUMI_CONFIG_PASSPHRASE: ${{ secrets.PULUMI_CONFIG_PASSPHRASE }}
"""


SCHEMAS_STEP = """\
      # Built from the checkout, spotproof has no bundled Karpenter schemas: EKS stacks
      # read them from node_modules (package-lock.json pins them, npm checks integrity).
      - name: Karpenter's schemas
        if: matrix.cloud == 'eks'
        working-directory: .
        run: npm ci --no-audit --no-fund --ignore-scripts
"""


def install(python: str, lock: str, choice: Choice) -> str:
    """A run step's lines that install one lock with ``python``, then spotproof itself where
    the runner builds it: every file by its hash, or the commit or the checkout."""
    lines = [f'{python} -m pip install --require-hashes -r "${{GITHUB_WORKSPACE}}/{lock}"']
    source = choice.source_install()
    if source:
        lines.append(f"{python} -m pip install --no-deps --no-build-isolation {source}")
    return "\n".join(f"          {line}" for line in lines)


def _built_from(choice: Choice) -> str:
    return "this repository's checkout" if choice.kind == "source" else choice.location


def render(choice: Choice, working_directory: str = ".", virtualenv: str = "venv") -> str:
    """The workflow for a project at ``working_directory`` (relative to the repository's
    root), installing spotproof as ``choice`` says, whose program runs in ``virtualenv``."""
    note = (
        f"# spotproof itself is built from {_built_from(choice)} after each lock.\n"
        if choice.from_source
        else ""
    )
    values = {
        "CHOICE": choice.described,
        "HOME": HOME,
        "SOURCE_NOTE": note,
        "SCHEMAS_STEP": SCHEMAS_STEP if choice.kind == "source" else "",
        "INSTALL_STACKS": install("python", path_of("stacks"), choice),
        "INSTALL_PLAN": install("python", path_of("${EXTRA}"), choice),
        "INSTALL_PROGRAM": install(f"{virtualenv}/bin/python", path_of("${EXTRA}"), choice),
        "INSTALL_PACK": install("python", path_of("policy"), choice),
        "LOCKS": f"{HOME}/*.txt",
        "VENV": virtualenv,
        "WORKDIR": working_directory,
        "PYTHON": PYTHON_VERSION,
        "NODE": NODE_VERSION,
        "CHECKOUT": actions.CHECKOUT.uses(),
        "SETUP_PYTHON": actions.SETUP_PYTHON.uses(),
        "SETUP_NODE": actions.SETUP_NODE.uses(),
        "GCP_AUTH": actions.GCP_AUTH.uses(),
        "AWS_CREDENTIALS": actions.AWS_CREDENTIALS.uses(),
        "AZURE_LOGIN": actions.AZURE_LOGIN.uses(),
        "PULUMI_AUTH": actions.PULUMI_AUTH.uses(),
        "PULUMI": actions.PULUMI.uses(),
    }
    text = _TEMPLATE
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text
