"""``spotproof ci``: the pull-request workflow a project copies into its own repository.

- ``stacks``   the project's stacks and the extra each needs, read from the files alone
  (a bare install plus PyYAML reads them: no Pulumi, no cloud SDK);
- ``workflow`` the GitHub Actions workflow ``spotproof ci init`` writes: one plan job per
  stack with only that stack's extra installed, third-party actions pinned by commit;
- ``command``  the ``spotproof ci init`` and ``spotproof ci stacks`` commands.
"""
