"""A power meter on Modbus TCP for flexgate's tests: a real pymodbus server (3.8.6, PyPI).

The site's power P (kW) rises by 1 kW every 100 ms from 1,000 kW and is written, in one step of
the event loop, in four encodings of four register maps:

  holding 3059  float32, big-endian words          P kW     (Schneider PM5000 "Active Power Total")
  input     52  float32, big-endian words          P*1000 W (Eastron SDM630 "Total system power")
  holding  100  int32, little-endian words (swap)  P*10     (0.1 kW steps)
  holding  200  float64, big-endian, byte-swapped  P kW
  holding  300  float32, big-endian words          NaN, always (a meter that is starting up)

Nothing is mapped at holding 5000 and beyond: a read there gets exception 0x02 (illegal data
address). SIGUSR1 makes the server stop answering (its event loop blocks, connections stay
open), as a hung meter does. Prints "listening PORT" once it accepts connections.

Usage: python modbus_meter.py PORT
"""

import asyncio
import signal
import struct
import sys
import time

from pymodbus.datastore import (
    ModbusSequentialDataBlock,
    ModbusServerContext,
    ModbusSlaveContext,
)
from pymodbus.server import StartAsyncTcpServer

HOLDING, INPUT = 3, 4


def words(fmt, value, word_swap=False, byte_swap=False):
    raw = struct.pack(">" + fmt, value)
    if byte_swap:
        raw = b"".join(raw[i + 1 : i + 2] + raw[i : i + 1] for i in range(0, len(raw), 2))
    ws = [int.from_bytes(raw[i : i + 2], "big") for i in range(0, len(raw), 2)]
    return list(reversed(ws)) if word_swap else ws


async def update(slave, hang):
    kw = 1000.0
    while True:
        if hang.is_set():
            time.sleep(3600)  # blocks the loop: the server stops answering
        slave.setValues(HOLDING, 3059, words("f", kw))
        slave.setValues(INPUT, 52, words("f", kw * 1000.0))
        slave.setValues(HOLDING, 100, words("i", int(round(kw * 10)), word_swap=True))
        slave.setValues(HOLDING, 200, words("d", kw, byte_swap=True))
        slave.setValues(HOLDING, 300, words("f", float("nan")))
        kw += 1.0
        await asyncio.sleep(0.1)


async def main(port):
    # The context adds 1 to protocol addresses, so blocks start at 1 for protocol address 0.
    slave = ModbusSlaveContext(
        hr=ModbusSequentialDataBlock(1, [0] * 4000),
        ir=ModbusSequentialDataBlock(1, [0] * 100),
    )
    context = ModbusServerContext(slaves={1: slave}, single=False)
    hang = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, hang.set)
    updater = asyncio.create_task(update(slave, hang))
    server = asyncio.create_task(StartAsyncTcpServer(context=context, address=("127.0.0.1", port)))
    # Wait until the port accepts connections, then say so.
    for _ in range(200):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            break
        except OSError:
            await asyncio.sleep(0.05)
    print(f"listening {port}", flush=True)
    await asyncio.gather(updater, server)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
