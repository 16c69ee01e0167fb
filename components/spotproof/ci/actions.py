"""Every GitHub Action the workflows use, pinned by the commit its tag named when it was read
from the action's repository (GitHub's security hardening guide: "Pin actions to a full
length commit SHA",
https://docs.github.com/actions/security-for-github-actions/security-guides/security-hardening-for-github-actions),
with the inputs its ``action.yml`` declares at that commit: actionlint cannot look up an
action pinned by commit, so the tests check every ``with:`` against these.

``spotproof ci init`` writes the pull-request workflow from the first group; this
repository's own release workflow (``.github/workflows/release.yml``) uses the second, and
``tests/test_release_workflow.py`` checks that file against them.
"""

from __future__ import annotations

from dataclasses import dataclass


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
"""The pull-request workflow's actions, in the order it first uses them."""

# --- the release workflow (.github/workflows/release.yml) ---------------------------------

UPLOAD_ARTIFACT = Action(
    "actions/upload-artifact",
    "v7.0.0",
    "bbbca2ddaa5d8feaa63e36b76fdaad77386f024f",
    _inputs(
        "archive compression-level if-no-files-found include-hidden-files name overwrite "
        "path retention-days"
    ),
)
DOWNLOAD_ARTIFACT = Action(
    "actions/download-artifact",
    "v8.0.1",
    "3e5f45b2cfb9172054b4087a40e8e0b5a5461e7c",
    _inputs(
        "artifact-ids digest-mismatch github-token merge-multiple name path pattern "
        "repository run-id skip-decompress"
    ),
)
ATTEST_BUILD_PROVENANCE = Action(
    # Since v4 a wrapper of actions/attest (its README); it needs id-token: write (the
    # Sigstore certificate) and attestations: write (storing the attestation).
    "actions/attest-build-provenance",
    "v4.1.0",
    "a2bbfa25375fe432b6a289bc6b6cd05ecd0c4c32",
    _inputs(
        "create-storage-record github-token predicate predicate-path predicate-type "
        "push-to-registry show-summary subject-checksums subject-digest subject-name "
        "subject-path"
    ),
)
PYPI_PUBLISH = Action(
    # The commit v1.14.0 names; its inputs are those of v1.8.14's action.yml (the newest
    # read here) and `attestations` (added in v1.11.0, on by default with trusted
    # publishing). Only `packages-dir` and `print-hash` are given.
    "pypa/gh-action-pypi-publish",
    "v1.14.0",
    "cef221092ed1bacb1cc03d23a2d87d1d172e277b",
    _inputs(
        "attestations packages-dir packages_dir password print-hash print_hash repository-url "
        "repository_url skip-existing skip_existing user verbose verify-metadata "
        "verify_metadata"
    ),
)
RELEASE_ACTIONS = (
    CHECKOUT,
    SETUP_PYTHON,
    SETUP_NODE,
    UPLOAD_ARTIFACT,
    DOWNLOAD_ARTIFACT,
    ATTEST_BUILD_PROVENANCE,
    PYPI_PUBLISH,
)
"""The release workflow's actions."""
