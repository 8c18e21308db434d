"""``--set`` arguments for in-process ``pcem`` runs in the tests."""


def set_args(*settings: str) -> list:
    """``set_args("model.max_iter=5", "features.min_df=1")`` -> ``["--set", "model.max_iter=5", "--set", ...]``."""
    return [arg for setting in settings for arg in ("--set", setting)]
