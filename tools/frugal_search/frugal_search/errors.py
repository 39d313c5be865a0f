"""The one error a user can act on: a bad search space, storage, program or option (exit 2)."""


class SearchError(Exception):
    """Something the user gave makes no sense: says what and where (the key, the file, the URL)."""
