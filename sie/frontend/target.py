"""What a request runs on: its model, profile and LoRA adapter, resolved once by the route.

Every task and device submission takes a `Target` as it is: the catalog lookup (with its metrics
note), the profile check and the LoRA check happen here and nowhere else.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

from sie.errors import InvalidInput
from sie.families import Family, family_of
from sie.frontend.state import FrontendState
from sie.frontend.tokenize import format_text
from sie.model_config import ModelConfig, Profile, RuntimeOptions, profile_in_id
from sie.shm.layout import with_lora


@dataclass(frozen=True, slots=True)
class Target:
    name: str  # as the request named it (messages quote it)
    slot: int  # the catalog slot the device knows the model by
    config: ModelConfig
    profile_name: str  # the request's profile, or the model's default one
    profile: Profile
    lora: str | None = None  # one of the model's `loras`, already checked

    @property
    def runtime(self) -> RuntimeOptions:
        return self.profile.adapter_options.runtime

    @property
    def family(self) -> Family:
        return family_of(self.config.family)

    def format(self, texts: list[str], *, is_query: bool, instruction: str | None = None) -> list[str]:
        """The texts in the profile's query or document template (sie.frontend.tokenize.format_text)."""
        runtime = self.runtime
        return [
            format_text(text, is_query=is_query, instruction=instruction, runtime=runtime) for text in texts
        ]

    def batch_key(self) -> int:
        """Items share a device batch only with items of the same profile and LoRA adapter."""
        return lora_config_key(self.config, self.profile_name, self.lora)


def resolve(state: FrontendState, name: str, profile: str | None = None, lora: str | None = None) -> Target:
    """The target of a request that names its model in the body (404 / 502 for an unknown one)."""
    slot, config = state.model(name)
    return bind(name, slot, config, profile, lora)


def bind(name: str, slot: int, config: ModelConfig, profile: str | None, lora: str | None) -> Target:
    """A looked-up model with the request's profile and adapter; an unknown one of either is a 400.
    A profile-qualified id (`<id>:<profile>`) picks its profile as `options.profile` would; the
    options may repeat it or say `default` (the id's own profile, as SIE's variant has it)."""
    named = profile_in_id(name, config)
    if named is not None:
        if profile not in (None, "default", named):
            raise InvalidInput(f"Model '{name}' names profile '{named}'; options.profile '{profile}' differs")
        profile = named
    if profile is not None and profile not in config.profiles:
        if profile in config.refused_profiles:
            reason = config.refused_profiles[profile]
            raise InvalidInput(f"Profile '{profile}' of model '{name}' is not served here: {reason}")
        known = ", ".join(sorted(config.profiles)) or "default"
        raise InvalidInput(f"Unknown profile '{profile}' for model '{name}'. Available: {known}")
    if lora is not None:
        lora_index(config, lora)
    chosen = profile or config.default_profile_name
    return Target(name, slot, config, chosen, config.profile(chosen), lora)


def profile_option(options: dict[str, Any] | None) -> str | None:
    """`options.profile` of a score or rerank request (a non-string is a 400)."""
    profile = (options or {}).get("profile")
    if profile is not None and not isinstance(profile, str):
        raise InvalidInput("options.profile must be a string")
    return profile


def lora_option(options: dict[str, Any] | None) -> str | None:
    """`options.lora` (what sie-sdk sends) or `options.lora_id`; checked against the model by `bind`."""
    lora = (options or {}).get("lora") or (options or {}).get("lora_id")
    if lora is not None and not isinstance(lora, str):
        raise InvalidInput("options.lora must be a string")
    return lora


def config_key(profile: str, *extra: str) -> int:
    """Items share a device batch only when this key (profile, LoRA, ...) matches."""
    return zlib.crc32("\0".join((profile, *extra)).encode())


def lora_config_key(config: ModelConfig, profile: str, lora: str | None) -> int:
    """The batch key of a request with a LoRA adapter, which also tells the device which one."""
    if lora is None:
        return config_key(profile)
    return with_lora(config_key(profile, lora), lora_index(config, lora))


def lora_index(config: ModelConfig, lora: str) -> int:
    """1 + the adapter's position among the model's sorted `loras`; 400 for an unknown one."""
    names = sorted(config.loras)
    if lora not in config.loras:
        known = ", ".join(names) or "none"
        raise InvalidInput(f"Unknown LoRA adapter '{lora}' for model '{config.sie_id}'. Available: {known}")
    return names.index(lora) + 1
