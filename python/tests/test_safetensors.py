import os
import struct
import tempfile
import unittest

import numpy as np

from dsa_parity import safetensors as st


class SafetensorsTest(unittest.TestCase):
    def test_round_trip_every_dtype(self):
        t = {
            "a": np.arange(6, dtype=np.float32).reshape(2, 3),
            "b": np.array([1.5, -2.25], dtype=np.float64),
            "c": np.array([[1, -1]], dtype=np.int32),
            "d": np.array([7, -7], dtype=np.int64),
            "e": np.array([0.5, 1.0], dtype=np.float16),
            "f": st.f32_to_bf16(np.array([1.0, 3.0, -0.5], dtype=np.float32)),
        }
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "x.safetensors")
            st.write(p, t, metadata={"format": "test"})
            back, dtypes, meta = st.read(p)
        self.assertEqual(meta, {"format": "test"})
        self.assertEqual(dtypes["f"], "BF16")
        self.assertEqual(dtypes["e"], "F16")
        for k in t:
            np.testing.assert_array_equal(back[k], t[k])
            self.assertEqual(back[k].shape, t[k].shape)

    def test_header_is_aligned_and_little_endian(self):
        b = st.serialize({"x": np.zeros(3, dtype=np.float32)})
        (n,) = struct.unpack("<Q", b[:8])
        self.assertEqual(n % 8, 0)
        self.assertEqual(len(b), 8 + n + 12)

    def test_bf16_conversion_rounds_to_nearest_even(self):
        x = np.array([1.0, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, -3.5, np.inf], dtype=np.float32)
        bits = st.f32_to_bf16(x)
        back = st.bf16_to_f32(bits)
        np.testing.assert_array_equal(back, np.array([1.0, 1.0, 1.0 + 2 ** -6, -3.5, np.inf], dtype=np.float32))
        self.assertTrue(np.isnan(st.bf16_to_f32(st.f32_to_bf16(np.array([np.nan], dtype=np.float32))))[0])
        self.assertEqual(st.to_float(bits, "BF16").dtype, np.float64)

    def test_malformed_files_are_refused(self):
        with self.assertRaises(st.SafetensorsError):
            st.parse(b"\x01\x02")
        with self.assertRaises(st.SafetensorsError):
            st.parse(struct.pack("<Q", 4) + b"[1]   ")
        h = b'{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}'
        with self.assertRaises(st.SafetensorsError):
            st.parse(struct.pack("<Q", len(h)) + h + b"\0" * 8)


if __name__ == "__main__":
    unittest.main()
