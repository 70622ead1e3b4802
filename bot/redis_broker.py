"""kombu's Redis transport, made to survive the broker dying under a busy worker.

When Redis goes away, Celery 5.7's consumer collects the broken connection and then closes
it; if collecting stopped halfway, the transport has already let go of its connection
details, and closing the channel (which first puts unacknowledged messages back) reads
them and raises AttributeError. Celery does not expect that kind of error there, calls it
unrecoverable, and the worker exits. Here that case is a connection error, which Celery
ignores while it reconnects; the messages stay in Redis's unacked set, which kombu restores
when their visibility timeout passes, and gaffer's reconciler sends any delivery or job
that waited too long again.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError

TRANSPORT = "bot.redis_broker:Transport"


class Channel(kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection.client is None:
            raise RedisConnectionError("the broker connection was released while Redis was away")
        return super()._connparams(asynchronous=asynchronous)


class Transport(kombu_redis.Transport):
    Channel = Channel
