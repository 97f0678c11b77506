"""The decorator every fedcore component uses."""

from __future__ import annotations

import functools

from kfp import dsl

from fedcore.deploy.env import image

# install_kfp_package=False: the project image already has the pinned kfp, and tasks must
# not reach PyPI (air-gapped clusters, reproducible images).
fedcore_component = functools.partial(dsl.component, base_image=image(), install_kfp_package=False)
