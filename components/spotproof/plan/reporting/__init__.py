"""A plan's findings for people and machines: ``formats`` writes the text, JSON, markdown
and GitHub annotation forms that ``spotproof plan --format`` offers."""
