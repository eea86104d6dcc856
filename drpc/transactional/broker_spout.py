"""What every broker spout shares: its arguments, its partitions' names, its fields and repr.

Contract. ``SourceOptions`` is the typed record a broker spout hands its
coordinator and emitters (made wherever they run, a Spark executor too):
the broker's ``BrokerSettings``, the partitions' ``names``, the declared
``fields``, ``take`` (entries per partition per batch), ``codec``,
``invalid`` and ``retry_for`` (``drpc.transactional.payloads``,
``drpc.transactional.brokers``). ``names`` is a format with one ``{}`` for
the partition number (partitions 0, 1, ... as far as they exist without a
gap: ``partition_name``) or a single name (one partition).

``BrokerSpout`` checks those arguments, declares ``tx`` then the fields, and
shows no secret in its ``repr``. ``BrokerReader`` is the base of a broker
spout's coordinator and emitters: its connection (a ``BrokerLink`` made on
first use), ``is_ready``, ``waiting_for`` (the run's status), ``close`` and
``number_of_partitions``, from five hooks a broker fills in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from drpc.model.fields import Fields
from drpc.model.streams import OutputFieldsDeclarer
from drpc.transactional.brokers import BrokerLink, BrokerSettings, waiting_for
from drpc.transactional.payloads import PayloadDecoder

C = TypeVar("C")

DEFAULT_RETRY_FOR = 30.0
"""Seconds a spout retries an unreachable broker before the batch fails."""


@dataclass(frozen=True)
class SourceOptions:
    settings: BrokerSettings
    names: str
    fields: Fields
    take: int
    codec: str
    invalid: str
    retry_for: float

    def numbered(self) -> bool:
        return "{}" in self.names

    def decoder(self, what: str) -> PayloadDecoder:
        return PayloadDecoder(
            self.fields, self.codec, self.invalid, f"{self.settings.description} {what}"
        )


def partition_name(names: str, partition: int) -> str:
    """The name of ``partition``: ``names`` with the number in its ``{}``, or ``names``."""
    return names.format(partition) if "{}" in names else names


class BrokerSpout:
    """The arguments of a broker spout (see the module doc)."""

    def __init__(
        self,
        settings: BrokerSettings,
        names: str,
        fields: Fields | Iterable[str] | str,
        take_per_batch: int,
        codec: str,
        invalid: str,
        retry_for: float,
    ) -> None:
        if take_per_batch < 1:
            raise ValueError(f"take_per_batch must be >= 1, got {take_per_batch}")
        if not names or names.count("{}") > 1 or names.replace("{}", "").count("{"):
            raise ValueError(f"expected a name or a format with one '{{}}', got {names!r}")
        if retry_for < 0:
            raise ValueError(f"retry_for must be >= 0, got {retry_for!r}")
        self.options = SourceOptions(
            settings, names, Fields.of(fields), take_per_batch, codec, invalid, retry_for
        )
        self.options.decoder(names)  # refuse bad codec or invalid options now

    @property
    def fields(self) -> Fields:
        return self.options.fields

    @property
    def take_per_batch(self) -> int:
        return self.options.take

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("tx", *self.options.fields))

    def __repr__(self) -> str:
        options = self.options
        return (
            f"{type(self).__name__}({options.settings!r}, {options.names!r}, "
            f"fields={list(options.fields)!r}, take_per_batch={options.take})"
        )


class BrokerReader(Generic[C]):
    """What a broker spout's coordinator and emitters share: the options, a ``BrokerLink``
    made on first use (``_connect``, ``_disconnect``, ``_transient``), readiness by
    ``_ping``, the waiting status, and the partitions that exist (``_exists``)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.settings = options.settings
        self.take = options.take
        self.decoder = options.decoder(options.names)
        self._link_: BrokerLink[C] | None = None
        self._partitions = 0

    def _connect(self) -> C:
        raise NotImplementedError

    def _disconnect(self, client: C) -> None:
        raise NotImplementedError

    def _transient(self) -> tuple[type[BaseException], ...]:
        raise NotImplementedError

    def _ping(self, client: C) -> object:
        raise NotImplementedError

    def _exists(self, client: C, name: str) -> bool:
        raise NotImplementedError

    @property
    def link(self) -> BrokerLink[C]:
        if self._link_ is None:
            self._link_ = BrokerLink(
                self.settings,
                self._connect,
                self._disconnect,
                self._transient(),
                retry_for=self.options.retry_for,
            )
        return self._link_

    def is_ready(self) -> bool:
        return self.link.probe(self._ping)

    def waiting_for(self) -> str | None:
        return waiting_for(self.settings.description)

    def close(self) -> None:
        if self._link_ is not None:
            self._link_.close()

    def name(self, partition: int) -> str:
        return partition_name(self.options.names, partition)

    def number_of_partitions(self) -> int:
        """The partitions that exist; one created since is found and counted (never fewer:
        one that went away reads as empty)."""
        if not self.options.numbered():
            return 1
        if self._partitions and self._link_ is not None and self.waiting_for():
            return self._partitions  # the broker is away: the partitions known so far

        def count(client: C) -> int:
            partitions = self._partitions
            while self._exists(client, self.name(partitions)):
                partitions += 1
            return partitions

        self._partitions = self.link.call(count)
        return self._partitions
