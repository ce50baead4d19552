"""Hydra configs of the verl recipe (``pc_recipe.yaml``); a package so Hydra finds it as ``pkg://``."""
