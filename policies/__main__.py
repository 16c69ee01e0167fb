"""`pulumi preview --policy-pack policies` runs this pack next to the real engine."""

from pack import ENFORCEMENT, policies
from pulumi_policy import PolicyPack

PolicyPack("spotproof", policies(), enforcement_level=ENFORCEMENT)
