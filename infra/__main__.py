"""The spotproof Pulumi program: `pulumi up -s gke-dev` runs this file."""

from spotproof.program import main

main()
