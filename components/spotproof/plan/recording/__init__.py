"""The stack's program run offline: every registration recorded under Pulumi's mocks
(``recorder``), drawn as ``pulumi preview`` would (``tree``), and its Kubernetes objects
extracted, written as YAML and schema-checked (``manifests``)."""
