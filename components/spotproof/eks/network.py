"""``spotproof:eks:Network``: the subnets an EKS cluster and its Karpenter nodes use.

Either the stack names existing private subnets (they are tagged for Karpenter discovery,
nothing else about them changes), or a minimal VPC is created: one private subnet per
zone for nodes, one small public subnet per zone for load balancers and the NAT gateway,
and a single NAT gateway for egress. One NAT gateway is the cheap choice: if its zone
fails, nodes elsewhere lose egress until it returns. Stacks that cannot accept that name
their own subnets.
"""

from __future__ import annotations

import ipaddress

import pulumi
import pulumi_aws as aws

from spotproof.cloud_tags import stack_tags
from spotproof.eks.nodepools import DISCOVERY_TAG
from spotproof.fleet.eks import NetworkSpec


def subnet_ranges(cidr: str, zones: int) -> tuple[list[str], list[str]]:
    """(private, public) CIDRs: private ones take an eighth of the range each, public ones
    share the last eighth."""
    network = ipaddress.IPv4Network(cidr)
    eighths = list(network.subnets(new_prefix=network.prefixlen + 3))
    public = list(eighths[-1].subnets(new_prefix=eighths[-1].prefixlen + 3))
    return [str(n) for n in eighths[:zones]], [str(n) for n in public[:zones]]


class Network(pulumi.ComponentResource):
    """Private subnets in two or more zones, tagged ``karpenter.sh/discovery=<cluster>``."""

    subnet_ids: pulumi.Output[list[str]]

    def __init__(
        self,
        name: str,
        cluster_name: str,
        spec: NetworkSpec,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("spotproof:eks:Network", name, None, opts)
        self._child = pulumi.ResourceOptions(parent=self)
        self._cluster = cluster_name
        if spec.subnets:
            for subnet in spec.subnets:
                aws.ec2.Tag(
                    f"{name}-{subnet.id}-discovery",
                    resource_id=subnet.id,
                    key=DISCOVERY_TAG,
                    value=cluster_name,
                    opts=self._child,
                )
            self.subnet_ids = pulumi.Output.from_input([s.id for s in spec.subnets])
        else:
            self.subnet_ids = self._create(name, spec)
        self.register_outputs({"subnet_ids": self.subnet_ids})

    def _tags(self, name: str, **extra: str) -> dict[str, str]:
        return {"Name": name, **stack_tags(self._cluster), **extra}

    def _create(self, name: str, spec: NetworkSpec) -> pulumi.Output[list[str]]:
        child = self._child
        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=spec.cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags=self._tags(f"{self._cluster}-vpc"),
            opts=child,
        )
        gateway = aws.ec2.InternetGateway(
            f"{name}-igw", vpc_id=vpc.id, tags=self._tags(f"{self._cluster}-igw"), opts=child
        )
        public_routes = aws.ec2.RouteTable(
            f"{name}-public",
            vpc_id=vpc.id,
            routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": gateway.id}],
            tags=self._tags(f"{self._cluster}-public"),
            opts=child,
        )
        private_cidrs, public_cidrs = subnet_ranges(spec.cidr, len(spec.zones))
        public_subnets = []
        for zone, cidr in zip(spec.zones, public_cidrs, strict=True):
            subnet = aws.ec2.Subnet(
                f"{name}-public-{zone}",
                vpc_id=vpc.id,
                cidr_block=cidr,
                availability_zone=zone,
                tags=self._tags(
                    f"{self._cluster}-public-{zone}", **{"kubernetes.io/role/elb": "1"}
                ),
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-public-{zone}",
                subnet_id=subnet.id,
                route_table_id=public_routes.id,
                opts=child,
            )
            public_subnets.append(subnet)
        address = aws.ec2.Eip(
            f"{name}-nat", domain="vpc", tags=self._tags(f"{self._cluster}-nat"), opts=child
        )
        nat = aws.ec2.NatGateway(
            f"{name}-nat",
            allocation_id=address.id,
            subnet_id=public_subnets[0].id,
            tags=self._tags(f"{self._cluster}-nat"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[gateway]),
        )
        private_routes = aws.ec2.RouteTable(
            f"{name}-private",
            vpc_id=vpc.id,
            routes=[{"cidr_block": "0.0.0.0/0", "nat_gateway_id": nat.id}],
            tags=self._tags(f"{self._cluster}-private"),
            opts=child,
        )
        private_ids = []
        for zone, cidr in zip(spec.zones, private_cidrs, strict=True):
            subnet = aws.ec2.Subnet(
                f"{name}-private-{zone}",
                vpc_id=vpc.id,
                cidr_block=cidr,
                availability_zone=zone,
                tags=self._tags(
                    f"{self._cluster}-private-{zone}",
                    **{"kubernetes.io/role/internal-elb": "1", DISCOVERY_TAG: self._cluster},
                ),
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-private-{zone}",
                subnet_id=subnet.id,
                route_table_id=private_routes.id,
                opts=child,
            )
            private_ids.append(subnet.id)
        return pulumi.Output.all(*private_ids).apply(list)
