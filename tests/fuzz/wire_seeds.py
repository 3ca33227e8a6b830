#!/usr/bin/env python3
"""Writes the wire fuzzer's seed inputs (tests/fuzz/seeds/wire/) for its modes 5-7: batches, texture objects and
typed frames at a worker's door. Each seed is the byte string wire_fuzz.cc's Bytes reader takes apart, in the order
its mode reads it (see BatchCalls, FillTyped, FuzzTexture and TypedFrames there), so a change of that order needs
the seeds written again: tests/fuzz/wire_seeds.py [FOLDER]."""
import os
import struct
import sys

POSTED = [4, 6, 7, 9, 12, 14, 17, 19, 20, 28, 33, 34, 39]  # The posted calls' ordinals (session_calls.h).
BATCH, MEM_ALLOC, TEX_CREATE, TEX_DESTROY, STREAM_SYNC = 33, 2, 38, 39, 15
KEEP = b"\xff"  # FillTyped: a field set (a byte of 16 or more), not left at its default.


class Seed:
    def __init__(self, mode):
        self.b = bytearray([mode])

    def pack(self, fmt, v):
        """Appends v in struct's little-endian `fmt`."""
        self.b += struct.pack("<" + fmt, v)
        return self

    def u8(self, v):
        return self.pack("B", v)

    def u16(self, v):
        return self.pack("H", v)

    def u32(self, v):
        return self.pack("I", v)

    def u64(self, v):
        return self.pack("Q", v)

    def f32(self, v):
        return self.pack("f", v)

    # Number<T>: a small value, an offset into the window, or raw bytes of T's width.
    def small(self, v):
        assert v < 16
        return self.u8(v)

    def in_window(self, offset):
        assert offset < 65536
        return self.u8(64).u16(offset)

    def raw(self, v, width):
        self.u8(255)
        return {1: self.u8, 2: self.u16, 4: self.u32, 8: self.u64}[width](v)

    def field(self):
        self.b += KEEP
        return self


def posted_pick(ordinal):
    return POSTED.index(ordinal)


def memset_entry(s, offset, count):  # dst, value, elementSize, count, stream
    s.u8(posted_pick(7)).u8(200)
    s.field().in_window(offset).field().small(7).field().small(4).field().raw(count, 8).field().small(0)
    return s.u8(200)  # The length is true.


def copy_entry(s, dst, src, nbytes):  # dst, src, bytes, stream
    s.u8(posted_pick(6)).u8(200)
    s.field().in_window(dst).field().in_window(src).field().raw(nbytes, 8).field().small(0)
    return s.u8(200)


def launch_entry(s):  # function, grid, block, sharedBytes, stream, params, cluster, cooperative
    s.u8(posted_pick(12)).u8(200)
    s.field().small(1)
    for _ in range(2):  # grid, block: Dim3 x, y, z
        s.field().field().raw(1 << 20, 4).field().small(1).field().small(1)
    s.field().raw(1 << 31, 4).field().small(0).field().u8(200).u8(8).b.extend(b"\0" * 8)  # 8 bytes of params
    s.u8(0)  # cluster left at its default
    s.field().small(1)
    return s.u8(200)


def batch_seeds():
    seeds = {}
    s = Seed(5).u8(2)  # three entries
    memset_entry(s, 0, 64)
    copy_entry(s, 4096, 0, 256)
    launch_entry(s)
    seeds["batch_memset_copy_launch_on_unallocated_memory"] = s
    s = Seed(5).u8(1)  # two entries: a batch inside the batch, then a memset
    s.u8(posted_pick(BATCH)).u8(200).field().u8(200).u8(12).b.extend(b"\x07\0\0\0\x40\0\0\0" + b"\0" * 4)
    s.u8(200)
    memset_entry(s, 16, 1)
    seeds["batch_within_a_batch_refused"] = s
    s = Seed(5).u8(0)  # a call that waits for its reply (memAlloc), which no batch may hold
    s.u8(216 + 26).u8(200).field().raw(1 << 20, 8).u8(200)
    seeds["batch_of_a_reply_call_refused"] = s
    s = Seed(5).u8(1)
    memset_entry(s, 0, 8)
    s.b[-1] = 0  # its length lies:
    s.u32(0xFFFFFFF8)
    s.u8(255).u32(1000).u8(200)  # an unknown ordinal
    seeds["batch_entry_length_beyond_the_batch"] = s
    s = Seed(5).u8(0)
    s.u8(posted_pick(7)).u8(0).u8(5).b.extend(b"\x01\x02\x03\x04\x05")  # 5 raw bytes: unaligned, no message
    s.u8(200)
    seeds["batch_entry_of_five_raw_bytes"] = s
    s = Seed(5).u8(241)  # two entries, cut inside the last
    memset_entry(s, 0, 4)
    memset_entry(s, 8, 4)
    s.u8(3)
    seeds["batch_cut_inside_its_last_entry"] = s
    return seeds


def texture(surface, resource, dims, format_index, channels_log2, w, h, d, layers, address, pitch=None,
            slice_pitch=None, address_mode=1, filter_mode=0, flags=0, end=200, end_extra=b""):
    s = Seed(6)
    s.u8((resource << 1) | surface)
    s.u8(dims).u8(format_index).u8(channels_log2)
    for e in (w, h, d, layers):
        s.u8(e) if e < 65 else s.u8(255).u32(e)
    kind, value = address
    if kind == "in":
        s.u8(0).u16(value)
    elif kind == "end":
        s.u8(170).u8(value)
    else:
        s.u8(255).u8(255).u64(value)
    s.u8(0) if pitch is None else s.u8(255).u64(pitch)
    s.u8(0) if slice_pitch is None else s.u8(255).u64(slice_pitch)
    s.u8(0).u8(address_mode) if address_mode < 5 else s.u8(255).u32(address_mode)
    s.u8(filter_mode)
    s.u8(0).u8(flags) if flags < 16 else s.u8(255).u32(flags)
    for v in (0.25, 0.5, 0.75, 1.0):
        s.f32(v)
    s.u8(end)
    s.b += end_extra
    return s


def texture_seeds():
    # kFormats order: u8 u16 u32 s8 s16 s32 half float ... : index 7 is 0x20 (float).
    return {
        "texture_pitch2d_float_16x16": texture(0, 2, 2, 7, 0, 16, 16, 1, 0, ("in", 0)),
        "texture_linear_u8x4_destroyed_twice": texture(0, 1, 1, 0, 2, 64, 1, 1, 0, ("in", 512), end=201),
        "surface_array_2d_layered": texture(1, 0, 2, 2, 0, 8, 8, 1, 3, ("in", 4096)),
        "texture_3d_reaching_past_the_buffer": texture(0, 2, 3, 7, 2, 64, 64, 64, 0, ("end", 16)),
        "texture_pitch_shorter_than_a_row": texture(0, 2, 2, 7, 0, 32, 4, 1, 0, ("in", 0), pitch=16),
        "texture_outside_the_window": texture(0, 1, 1, 0, 0, 8, 1, 1, 0, ("raw", 0x7F0000000000)),
        "texture_huge_extents_and_slice_pitch": texture(0, 2, 3, 1, 1, 0xFFFFFFFF, 0x10000, 0xFFFF, 0, ("in", 0),
                                                         slice_pitch=1 << 63),
        "texture_forged_handle_destroyed": texture(0, 2, 2, 7, 0, 4, 4, 1, 0, ("in", 0), end=10,
                                                   end_extra=bytes([3])),
        "texture_address_mode_and_flags_out_of_range": texture(0, 2, 2, 7, 0, 4, 4, 1, 0, ("in", 0),
                                                               address_mode=255, filter_mode=9, flags=255),
    }


def door(frames, cut=False):
    s = Seed(7).u8(0xA5 if cut else 0)  # TypedFrames' kCutFrames
    for f in frames:
        s.b += f
    return s


def frame_mem_alloc(seq, nbytes):
    return bytes([56 + 26, seq]) + KEEP + bytes([255]) + struct.pack("<Q", nbytes)


def frame_texture(seq, width, height, at=0):
    # surface resource dims format channels address pitch slicePitch width height depth layers addressModes filter
    # flags border0..3
    b = bytearray([24, seq])
    b += KEEP + bytes([0]) + KEEP + bytes([2]) + KEEP + bytes([2]) + KEEP + bytes([255]) + struct.pack("<I", 0x20)
    b += KEEP + bytes([1]) + KEEP + bytes([64]) + struct.pack("<H", at)
    b += KEEP + bytes([255]) + struct.pack("<Q", width * 4) + KEEP + bytes([0])
    b += KEEP + bytes([255]) + struct.pack("<I", width) + KEEP + bytes([255]) + struct.pack("<I", height)
    b += KEEP + bytes([1]) + KEEP + bytes([0]) + KEEP + bytes([0]) + KEEP + bytes([0]) + KEEP + bytes([0])
    b += (KEEP + struct.pack("<f", 0.5)) * 4
    return bytes(b)


def frame_texture_destroy(seq, handle):
    return bytes([48, seq]) + KEEP + bytes([255]) + struct.pack("<Q", handle)


def frame_sync(seq):
    return bytes([95, seq]) + KEEP + bytes([0])  # 95 % 40: streamSynchronize


def frame_batch(seq):
    s = Seed(0)
    s.b = bytearray([0, seq])
    s.u8(1)
    memset_entry(s, 0, 16)
    launch_entry(s)
    return bytes(s.b)


def door_seeds():
    return {
        "door_alloc_texture_destroy_sync": door([frame_mem_alloc(1, 1 << 20), frame_texture(2, 16, 16),
                                                 frame_texture_destroy(0, 1), frame_sync(3)]),
        "door_texture_beyond_the_window": door([frame_texture(1, 1 << 16, 1 << 16)]),
        "door_batch_frame": door([frame_mem_alloc(1, 4096), frame_batch(0), frame_sync(2)]),
        # An enter frame with 16 bytes, an entered frame, a reply frame of 8 bytes: kinds 240, 236, 237 % 5.
        "door_enter_again_and_worker_frame_kinds": door([bytes([240, 1, 2]) + b"\0" * 16, bytes([236, 2, 0]),
                                                         bytes([237, 3, 1]) + b"\0" * 8, frame_sync(1)]),
        "door_same_sequence_number_twice": door([frame_mem_alloc(1, 4096), frame_mem_alloc(1, 4096),
                                                 frame_sync(1)]),
        "door_frame_cut_short": door([frame_mem_alloc(1, 4096), frame_texture(2, 8, 8)], cut=True),
    }


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "seeds", "wire")
    os.makedirs(out, exist_ok=True)
    for seeds in (batch_seeds(), texture_seeds(), door_seeds()):
        for name, seed in seeds.items():
            with open(os.path.join(out, name), "wb") as f:
                f.write(bytes(seed.b))


if __name__ == "__main__":
    main()
