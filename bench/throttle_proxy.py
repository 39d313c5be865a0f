#!/usr/bin/env python3
"""A TCP proxy on loopback whose uploads (client to server) share one bandwidth limit, as a node's
link to object storage does: bench/remote.sh measures the time from SIGTERM to a committed remote
checkpoint through it.

    throttle_proxy.py LISTEN_PORT TARGET_PORT BYTES_PER_SECOND   (prints "ready" once listening)
"""
import asyncio
import sys
import time


class TokenBucket:
    """One budget of bytes for every connection: refilled at `rate` a second, 50 ms of burst."""

    def __init__(self, rate: float):
        self.rate = rate
        self.burst = rate / 20
        self.tokens = self.burst
        self.stamp = time.monotonic()
        self.lock = asyncio.Lock()

    async def take(self, n: int) -> None:
        async with self.lock:
            while True:
                now = time.monotonic()
                self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
                self.stamp = now
                if self.tokens >= n:
                    self.tokens -= n
                    return
                await asyncio.sleep((n - self.tokens) / self.rate)


async def pipe(reader, writer, bucket):
    try:
        while True:
            data = await reader.read(16384)
            if not data:
                break
            if bucket is not None:
                await bucket.take(len(data))
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def main() -> None:
    listen, target, rate = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    bucket = TokenBucket(rate)

    async def handle(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(pipe(client_reader, server_writer, bucket), pipe(server_reader, client_writer, None))

    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
