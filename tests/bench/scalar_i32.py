#!/usr/bin/env python3
"""Writes a safetensors file holding one rank-0 i32 tensor to stdout: NAME VALUE (a decode
step's `pos` for `fbc bench --inputs`)."""
import json
import struct
import sys

name, value = sys.argv[1], int(sys.argv[2])
header = json.dumps({name: {"dtype": "I32", "shape": [], "data_offsets": [0, 4]}}).encode()
header += b" " * (-len(header) % 8)
sys.stdout.buffer.write(struct.pack("<Q", len(header)) + header + struct.pack("<i", value))
