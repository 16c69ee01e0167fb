"""The CrossGuard pack: ``pulumi preview --policy-pack "$(spotproof policy-pack)"``.

Pulumi runs this file with the ``python3`` on PATH (no ``virtualenv`` is named in
``PulumiPolicy.yaml``), so run it from the environment spotproof is installed in, with
the ``policy`` extra.
"""

from pulumi_policy import PolicyPack

from spotproof.policy.crossguard import ENFORCEMENT, policies

PolicyPack("spotproof", policies(), enforcement_level=ENFORCEMENT)
