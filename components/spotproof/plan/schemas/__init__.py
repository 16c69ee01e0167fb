"""Objects checked as their API server would before anything reads them.

- ``field_types``: the JSON type of every field a rule reads;
- ``api_server``: what the Kubernetes API refuses that its OpenAPI schema lets through;
- ``karpenter``, ``keda``, ``kueue``, ``jobset``: each controller's CRD and webhook rules.
"""
