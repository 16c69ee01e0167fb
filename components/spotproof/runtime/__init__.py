"""What runs inside the training container. Never imports Pulumi or a cloud SDK."""
