"""`rlmm segments list|show` and `rlmm partitions`: what the remote log holds.

Invariant: read-only (a MetadataView and the RSM's listing); each command calls one
library function of rlmm.ops.inventory and hands the result to the Output (the
listing through ``show_segments``, which the demo prints with too). The view
is the metadata log's, or with ``--from-store`` the remote store's alone
(``rlmm.archive.open_archive_view``). A listing is refused (exit 2) when it names a
topic the metadata does not know, when the configured remote storage holds none of
the listed segments (a wrong ``[remote]``), or when the metadata lists nothing while
the store holds segment objects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from rlmm.cli.session import common_options, from_store_option, session
from rlmm.model import RemoteLogSegmentState

if TYPE_CHECKING:
    from rlmm.cli.output import Output
    from rlmm.config import RlmmConfig
    from rlmm.model import RemoteLogSegmentMetadata
    from rlmm.ops.inventory import SegmentFilter

_STATES = [s.name for s in RemoteLogSegmentState]


@click.group("segments")
def segments() -> None:
    """Remote log segments known to the metadata."""


@segments.command("list")
@click.option("--topic", help="only this topic")
@click.option("--partition", type=click.IntRange(min=0), help="only this partition number")
@click.option("--state", type=click.Choice(_STATES, case_sensitive=False), help="only this state")
@click.option("--epoch", type=click.IntRange(min=0), help="only segments holding this leader epoch")
@from_store_option
@common_options
def list_segments(
    topic: str | None, partition: int | None, state: str | None, epoch: int | None,
    from_store: bool,
) -> None:  # fmt: skip
    """List segments (every state), by topic, partition and start offset."""
    from rlmm.ops.inventory import SegmentFilter

    where = SegmentFilter(
        topic, partition, None if state is None else RemoteLogSegmentState[state.upper()], epoch
    )
    show_segments(session().config, session().output, where, from_store=from_store)


def show_segments(
    config: RlmmConfig,
    output: Output,
    where: SegmentFilter | None = None,
    *,
    from_store: bool = False,
) -> list[RemoteLogSegmentMetadata]:
    """What `rlmm segments list` prints, for the command and the demo alike (so the two
    cannot differ): the segments ``where`` selects, checked against the remote store
    and handed to ``output.segments`` with the offsets each serves. Returns them."""
    from rlmm.archive import open_archive_view
    from rlmm.factory import open_remote_layout
    from rlmm.ops.inventory import (
        SegmentFilter,
        check_remote_holds,
        check_topic_known,
        list_segments,
        served_offsets,
    )

    where = where or SegmentFilter()
    view = open_archive_view(config, from_store=from_store, topics=_topics(where.topic))
    with view, open_remote_layout(config) as layout:
        check_topic_known(view, where.topic)
        listed = list_segments(view, where)
        check_remote_holds(layout, listed)
        output.segments(listed, served_offsets(view, listed))
    return listed


# Kafka's base64url ids may start with "-" ("-b0w86WETV-..."): an unknown option-like
# token is the id, not an error (known options such as --json still work).
@segments.command("show", context_settings={"ignore_unknown_options": True})
@click.argument("segment_id")
@from_store_option
@common_options
def show_segment(segment_id: str, from_store: bool) -> None:
    """Everything about one segment: metadata, stored objects, the events that made it
    (none with --from-store: there is no metadata log to read them from)."""
    from rlmm.archive import open_archive_view
    from rlmm.factory import open_remote_layout
    from rlmm.ops.inventory import describe_segment

    config = session().config
    view = open_archive_view(config, from_store=from_store)
    with view, open_remote_layout(config) as layout:
        detail = describe_segment(config, view, layout, segment_id, history=not from_store)
        session().output.segment_detail(detail)


@click.command("partitions")
@click.option("--topic", help="only this topic")
@from_store_option
@common_options
def partitions(topic: str | None, from_store: bool) -> None:
    """Per partition: segments, remote bytes, offsets, highest offset per epoch, states."""
    from rlmm.archive import open_archive_view
    from rlmm.factory import open_remote_layout
    from rlmm.ops.inventory import (
        SegmentFilter,
        check_remote_holds,
        check_topic_known,
        list_segments,
        summarize_partitions,
    )

    config = session().config
    view = open_archive_view(config, from_store=from_store, topics=_topics(topic))
    with view, open_remote_layout(config) as layout:
        check_topic_known(view, topic)
        check_remote_holds(layout, list_segments(view, SegmentFilter(topic)))
        session().output.partitions(summarize_partitions(view, SegmentFilter(topic)))


def _topics(topic: str | None) -> list[str] | None:
    """What a store-alone view needs to read for ``--topic`` (None: every topic)."""
    return None if topic is None else [topic]


def register(main: click.Group) -> None:
    main.add_command(segments)
    main.add_command(partitions)
