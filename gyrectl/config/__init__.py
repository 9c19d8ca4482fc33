"""One typed config tree from YAML: ``schema`` (frozen dataclasses, a docstring per field; the
``training`` section's in ``training``),
``loader`` (YAML + ``--set`` overrides -> dataclasses, with field paths in every error) and
``checks`` (cross-field rules that show their arithmetic) and ``placement`` (how the GPUs make
server engines).
May import: errors."""

from gyrectl.config.loader import apply_overrides, dump_config, load_config, parse_config
from gyrectl.config.schema import Config

__all__ = ["Config", "apply_overrides", "dump_config", "load_config", "parse_config"]
