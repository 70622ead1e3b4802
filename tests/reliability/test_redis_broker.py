"""The Redis transport gaffer's workers use, when Redis dies under a busy worker."""

from __future__ import annotations

import pytest
from kombu import Connection, Exchange, Queue
from kombu.common import ignore_errors

from bot.redis_broker import TRANSPORT
from tests.conftest import BACKENDS, BROKER_PREFIX, REDIS_URL


@pytest.mark.skipif("services" not in BACKENDS, reason="needs the Redis of the services backend")
def test_a_half_collected_connection_closes_as_a_connection_error() -> None:
    """What Celery's consumer does when the broker is lost: collect the connection, then close
    it ignoring connection errors. Collecting can stop after the transport let go of its
    connection details; closing the channel then puts its unacknowledged message back, which
    with kombu's own transport raised AttributeError and the worker exited ("Unrecoverable
    error"). Here it is a connection error, which Celery ignores while it reconnects."""
    options = {"global_keyprefix": f"{BROKER_PREFIX}collect:"}
    url = f"{REDIS_URL}/7"
    queue = Queue("collect", Exchange("collect"), "collect")
    with Connection(url, transport_options=options) as producer:
        producer.Producer().publish(
            {"n": 1}, exchange=queue.exchange, routing_key="collect", declare=[queue]
        )
    connection = Connection(url, transport=TRANSPORT, transport_options=options)
    assert queue(connection.default_channel).get(no_ack=False) is not None  # unacknowledged
    connection.transport.client = None  # where a collect() that stopped halfway leaves it
    ignore_errors(connection, connection.close)  # raises nothing
