"""The GitHub Actions workflow ``spotproof ci init`` writes into a user's repository.

What it holds, and why:

- **One plan job per stack**, each installing only that stack's extra (``gcp``, ``aws``,
  ``azure``) at the version the workflow pins: an AKS stack never runs where only the GCP
  SDK is installed. The list comes from a first job that installs the bare package and
  PyYAML (seconds) and reads the stack files (``spotproof ci stacks``), so a stack added
  later is planned without editing the workflow.
- **Nothing from this repository but the project**: spotproof comes from the package
  index at ``SPOTPROOF``, the user's own ``requirements.txt`` beside the project is
  installed when there is one, and Node.js (for Karpenter's bundled schemas) from
  ``actions/setup-node``.
- **Third-party actions pinned by commit**, the tag beside it in a comment (GitHub's
  security hardening guide: "Pin actions to a full length commit SHA",
  https://docs.github.com/actions/security-for-github-actions/security-guides/security-hardening-for-github-actions);
  each commit below was read from the action's repository at that tag.
- **pip's cache** keyed on this workflow file, which holds the version: a user's repository
  need not have a requirements file for ``actions/setup-python``'s cache to work.
- **No expression inside a script**: matrix values reach ``run:`` steps as environment
  variables, since a stack file's name comes from the pull request
  (https://docs.github.com/actions/security-for-github-actions/security-guides/security-hardening-for-github-actions#understanding-the-risk-of-script-injections).
- **A preview job** (``pulumi preview`` with the installed CrossGuard pack) where the
  repository variable ``SPOTPROOF_PREVIEW`` is ``"true"`` and the pull request comes from
  the repository itself: GitHub withholds secrets and OIDC tokens from forks.
"""

from __future__ import annotations

from dataclasses import dataclass

PYTHON_VERSION = "3.11"
NODE_VERSION = "22"
WORKFLOW_PATH = ".github/workflows/spotproof.yml"


@dataclass(frozen=True)
class Action:
    name: str
    tag: str
    commit: str
    """The commit the tag names in the action's repository."""
    inputs: frozenset[str]
    """The inputs its ``action.yml`` declares at that commit: actionlint cannot look up an
    action pinned by commit, so the tests check every ``with:`` against these."""

    def uses(self) -> str:
        return f"{self.name}@{self.commit} # {self.tag}"


def _inputs(names: str) -> frozenset[str]:
    return frozenset(names.split())


CHECKOUT = Action(
    "actions/checkout",
    "v7.0.1",
    "3d3c42e5aac5ba805825da76410c181273ba90b1",
    _inputs(
        "allow-unsafe-pr-checkout clean fetch-depth fetch-tags filter github-server-url lfs "
        "path persist-credentials ref repository set-safe-directory show-progress "
        "sparse-checkout sparse-checkout-cone-mode ssh-key ssh-known-hosts ssh-strict ssh-user "
        "submodules token"
    ),
)
SETUP_PYTHON = Action(
    "actions/setup-python",
    "v7.0.0",
    "5fda3b95a4ea91299a34e894583c3862153e4b97",
    _inputs(
        "allow-prereleases architecture cache cache-dependency-path check-latest freethreaded "
        "pip-version python-version python-version-file token update-environment"
    ),
)
SETUP_NODE = Action(
    "actions/setup-node",
    "v7.0.0",
    "820762786026740c76f36085b0efc47a31fe5020",
    _inputs(
        "architecture cache cache-dependency-path check-latest mirror mirror-token "
        "node-version node-version-file package-manager-cache registry-url scope token"
    ),
)
GCP_AUTH = Action(
    "google-github-actions/auth",
    "v3.0.0",
    "7c6bc770dae815cd3e89ee6cdf493a5fab2cc093",
    _inputs(
        "access_token_lifetime access_token_scopes access_token_subject audience "
        "cleanup_credentials create_credentials_file credentials_json delegates "
        "export_environment_variables id_token_audience id_token_include_email project_id "
        "request_reason service_account token_format universe workload_identity_provider"
    ),
)
AWS_CREDENTIALS = Action(
    "aws-actions/configure-aws-credentials",
    "v6.2.3",
    "e6de054238d6b7531b4efff3b6587d9aade6a06c",
    _inputs(
        "action-timeout-s allowed-account-ids audience aws-access-key-id aws-profile "
        "aws-region aws-secret-access-key aws-session-token custom-tags disable-retry "
        "force-skip-oidc http-proxy inline-session-policy managed-session-policies "
        "mask-aws-account-id no-proxy output-credentials output-env-credentials "
        "overwrite-aws-profile retry-max-attempts role-chaining role-duration-seconds "
        "role-external-id role-session-name role-skip-session-tagging role-to-assume "
        "special-characters-workaround sts-endpoint transitive-tag-keys "
        "unset-current-credentials use-existing-credentials web-identity-token-file"
    ),
)
AZURE_LOGIN = Action(
    "azure/login",
    "v3.0.1",
    "f5d393ae46f8fde4be8b75f32e3fc50e654ad0ca",
    _inputs(
        "allow-no-subscriptions audience auth-type client-id creds enable-AzPSSession "
        "environment subscription-id tenant-id"
    ),
)
PULUMI_AUTH = Action(
    "pulumi/auth-actions",
    "v2.1.0",
    "141415910c3beb54e03b48e9057c204c97b956f2",
    _inputs(
        "cloud-url export-environment-variables organization requested-token-type scope "
        "token-expiration"
    ),
)
PULUMI = Action(
    "pulumi/actions",
    "v7.0.0",
    "8e5e406f4007fca908480587cb9893c07090f58d",
    _inputs(
        "always-include-summary cloud-url color command comment-on-pr comment-on-pr-number "
        "comment-on-summary config-map continue-on-error debug diff edit-pr-comment exclude "
        "exclude-dependents exclude-protected expect-no-changes github-token log-flow "
        "log-verbosity message parallel plan policyPackConfigs policyPacks pulumi-version "
        "pulumi-version-file refresh remove replace secrets-provider stack-name "
        "suppress-outputs suppress-progress target target-dependents upsert work-dir"
    ),
)
ACTIONS = (
    CHECKOUT,
    SETUP_PYTHON,
    SETUP_NODE,
    GCP_AUTH,
    AWS_CREDENTIALS,
    AZURE_LOGIN,
    PULUMI_AUTH,
    PULUMI,
)

_TEMPLATE = """\
# Plans every stack of this Pulumi project offline on each pull request, and previews it
# for real where credentials exist. Written by `spotproof ci init` (spotproof @VERSION@);
# run it again after upgrading spotproof, or change SPOTPROOF below.
#
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
  SPOTPROOF: "@VERSION@"
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
          cache-dependency-path: @WORKFLOW@
      - id: list
        name: Stacks and the extra each needs
        run: |
          python -m pip install "spotproof==${SPOTPROOF}" "pyyaml>=6"
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
          cache-dependency-path: @WORKFLOW@
      - uses: @SETUP_NODE@
        with:
          node-version: "@NODE@"
      - name: Install spotproof and the program's requirements
        run: |
          python -m pip install "spotproof[${EXTRA}]==${SPOTPROOF}"
          if [ -f requirements.txt ]; then python -m pip install -r requirements.txt; fi
      - name: Plan
        # --format github: ::error annotations at the config line each finding came from,
        # and the Markdown tables appended to $GITHUB_STEP_SUMMARY.
        run: spotproof plan --stack "${STACK}" --strict --format github

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
          cache-dependency-path: @WORKFLOW@
      # Two environments: pulumi-policy pins protobuf 5 while a GCP program needs 6. The
      # program runs in the virtualenv its Pulumi.yaml names (@VENV@), the CrossGuard
      # pack with the python on PATH.
      - name: Program environment
        run: |
          python -m venv @VENV@
          @VENV@/bin/python -m pip install "spotproof[${EXTRA}]==${SPOTPROOF}"
          if [ -f requirements.txt ]; then @VENV@/bin/python -m pip install -r requirements.txt; fi
      - id: pack
        name: CrossGuard pack environment
        run: |
          python -m pip install "spotproof[policy]==${SPOTPROOF}"
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


def render(version: str, working_directory: str = ".", virtualenv: str = "venv") -> str:
    """The workflow for a project at ``working_directory`` (relative to the repository's
    root) planned with spotproof ``version``, whose program runs in ``virtualenv``."""
    values = {
        "VERSION": version,
        "VENV": virtualenv,
        "WORKDIR": working_directory,
        "WORKFLOW": WORKFLOW_PATH,
        "PYTHON": PYTHON_VERSION,
        "NODE": NODE_VERSION,
        "CHECKOUT": CHECKOUT.uses(),
        "SETUP_PYTHON": SETUP_PYTHON.uses(),
        "SETUP_NODE": SETUP_NODE.uses(),
        "GCP_AUTH": GCP_AUTH.uses(),
        "AWS_CREDENTIALS": AWS_CREDENTIALS.uses(),
        "AZURE_LOGIN": AZURE_LOGIN.uses(),
        "PULUMI_AUTH": PULUMI_AUTH.uses(),
        "PULUMI": PULUMI.uses(),
    }
    text = _TEMPLATE
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text
