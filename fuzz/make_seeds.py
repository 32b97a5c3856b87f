#!/usr/bin/env python3
"""Write the hand-made seeds of fuzz/corpus/st_parse/ (names start "seed_").

usage: python3 fuzz/make_seeds.py [--shared DIR]...

Without arguments it (re)writes only the hand-made seeds. Each --shared DIR
also copies the files of DIR under 20 KB (e.g. tests/fixtures/corpus/safetensors and
tests/fixtures/corpus/safetensors-invalid) into the corpus, names unchanged.

Seeds named seed_ok_* should be accepted by a strict parser; seed_bad_* are
near misses that should be refused; seed_edge_* are cases where the
safetensors format itself leaves room (unknown fields, deep nesting) and
either answer is fine so long as it is a clean one.
"""
import json
import os
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "st_parse")

DTYPES = {  # name: bits per element
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32,
    "F32": 32, "F64": 64, "I64": 64, "U64": 64, "C64": 64, "F4": 4,
    "F6_E2M3": 6, "F6_E3M2": 6,
}


def nbytes(dtype, shape):
    n = 1
    for d in shape:
        n *= d
    return n * DTYPES[dtype] // 8


def pattern(n, salt=0):
    return bytes((i * 37 + salt * 11 + 5) & 0xFF for i in range(n))


def file_bytes(header, data=b"", align=8, pad=b" "):
    """8-byte little-endian length, header (str or bytes), padding, data."""
    h = header.encode("utf-8") if isinstance(header, str) else header
    if align:
        h += pad * (-len(h) % align)
    return struct.pack("<Q", len(h)) + h + data


def build(tensors, metadata=None, meta_first=True, align=8, extra=None):
    """tensors: list of (name, dtype, shape[, data]); returns file bytes with
    data offsets contiguous in list order, header in list order."""
    hdr = {}
    data = b""
    if metadata is not None and meta_first:
        hdr["__metadata__"] = metadata
    for i, t in enumerate(tensors):
        name, dtype, shape = t[0], t[1], t[2]
        blob = t[3] if len(t) > 3 else pattern(nbytes(dtype, shape), i)
        entry = {"dtype": dtype, "shape": list(shape),
                 "data_offsets": [len(data), len(data) + len(blob)]}
        if extra and name in extra:
            entry.update(extra[name])
        hdr[name] = entry
        data += blob
    if metadata is not None and not meta_first:
        hdr["__metadata__"] = metadata
    text = json.dumps(hdr, separators=(",", ":"), ensure_ascii=False)
    return file_bytes(text, data, align)


def raw(header_text, data=b"", align=8):
    return file_bytes(header_text, data, align)


def seeds():
    s = {}
    # ---- accepted -------------------------------------------------------
    every = []
    for name, bits in DTYPES.items():
        shape = [2, 4] if bits >= 8 else ([2, 2] if bits == 4 else [1, 4])
        every.append(("t_" + name.lower(), name, shape))
    s["seed_ok_every_dtype"] = build(every)
    s["seed_ok_scalar"] = build([("step", "I64", []), ("lr", "F32", [])])
    s["seed_ok_zero_size"] = build([("a", "F32", [2]), ("empty", "BF16", [0]),
                                    ("empty2d", "F16", [3, 0]), ("b", "U8", [3])])
    s["seed_ok_only_empty"] = build([("e1", "F32", [0]), ("e2", "I8", [0, 5])])
    s["seed_ok_empty_header"] = raw("{}")
    s["seed_ok_empty_unpadded"] = file_bytes("{}", align=0)
    s["seed_ok_metadata_null"] = raw(
        '{"__metadata__":null,"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"ab")
    s["seed_ok_metadata_object"] = build(
        [("model.embed_tokens.weight", "BF16", [4, 2])],
        {"format": "pt", "wsync.step": "42", "empty": "", "json": '{"nested": [1, 2]}'})
    s["seed_ok_metadata_empty"] = build([("x", "F64", [1])], {})
    s["seed_ok_metadata_last"] = build([("x", "I32", [2])], {"format": "np"}, meta_first=False)
    s["seed_ok_escapes"] = raw(
        '{"a\\"b\\\\c\\/d\\b\\f\\n\\r\\t\\u0041\\u00e9":'
        '{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        '"__metadata__":{"k\\"ey":"v\\\\al\\u0007ue"}}', b"\x01")
    s["seed_ok_unicode"] = build(
        [("gewichte.\u00e4\u00f6\u00fc", "F16", [2]), ("\u91cd\u307f", "F16", [1]),
         ("emoji.\U0001F600", "U8", [3])], {"\u540d\u524d": "\u5024 \U0001F680"})
    s["seed_ok_surrogate_pair"] = raw(
        '{"p\\ud83d\\ude00q":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"z")
    s["seed_ok_nul_in_name"] = raw(
        '{"a\\u0000b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        '"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"xy")
    s["seed_ok_whitespace"] = raw(
        ' \n\t\r{ "w" : { "dtype" : "F32" , "shape" : [ 1 , 2 ] , '
        '"data_offsets" : [ 0 , 8 ] } }\n\t  ', pattern(8))
    s["seed_ok_reordered_keys"] = raw(
        '{"b":{"data_offsets":[8,12],"shape":[2],"dtype":"BF16"},'
        '"__metadata__":{"z":"1","a":"2"},'
        '"a":{"shape":[2],"data_offsets":[0,8],"dtype":"F32"}}', pattern(12))
    s["seed_ok_misaligned"] = build([("odd", "U8", [3]), ("f", "F32", [2])], align=0)
    s["seed_ok_sub_byte"] = build([("fp4", "F4", [3, 2]), ("fp6a", "F6_E2M3", [8]),
                                   ("fp6b", "F6_E3M2", [2, 2]), ("e8m0", "F8_E8M0", [2])])
    s["seed_ok_rank_64"] = build([("deep", "U8", [1] * 63 + [2])])
    s["seed_ok_big_zero_dim"] = build([("huge_but_empty", "F32", [18446744073709551615, 0]),
                                       ("w", "U8", [1])])
    s["seed_ok_big_dims"] = build([("d", "U8", [4294967296, 0, 4294967296])])
    names = []
    for layer in range(12):
        for part in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                     "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
            names.append(("model.layers.%d.%s.weight" % (layer, part), "BF16", [2, 2]))
        names.append(("model.layers.%d.input_layernorm.weight" % layer, "F32", [2]))
    s["seed_ok_many_tensors"] = build(names, {"format": "pt"})
    s["seed_ok_padded_nul_data"] = build([("w", "U8", [8], b"\0" * 8)])
    ok1 = '{"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}'
    # ---- edge: the format leaves room -----------------------------------
    s["seed_edge_unknown_fields"] = raw(
        '{"w":{"dtype":"U8","extra":[1,{"a":null,"b":"\\u00e9"}],"shape":[1],'
        '"data_offsets":[0,1],"quant":"none","n":-1.5e3}}', b"q")
    s["seed_bad_unknown_top_level"] = raw('{"__extra__":{"x":1},' + ok1[1:], b"ab")
    s["seed_edge_deep_nesting_60"] = raw(
        '{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":' + "[" * 60 + "]" * 60 + "}}",
        b"q")
    for depth in (8, 64, 65):  # nesting of the unknown field's value alone
        s["seed_edge_deep_nesting_%d" % depth] = raw(
            '{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":' +
            '[{"k":' * (depth // 2) + "[" * (depth % 2) + "0" + "]" * (depth % 2) +
            '}]' * (depth // 2) + "}}", b"q")
    s["seed_edge_deep_nesting_100"] = raw(
        '{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":' + "[" * 100 + "]" * 100 + "}}",
        b"q")
    s["seed_edge_numbers"] = raw(
        '{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":[-0,1.5e-3,-2E+10,0.0,true,false]}}',
        b"q")
    s["seed_edge_bom"] = file_bytes(b'\xef\xbb\xbf{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"q")
    s["seed_edge_nul_padding"] = file_bytes(
        '{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"q", pad=b"\0")
    s["seed_edge_empty_name"] = raw('{"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"q")
    s["seed_edge_lone_surrogate"] = raw(
        '{"a\\ud800":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"q")
    s["seed_bad_surrogate_then_bmp"] = raw(
        '{"a\\ud83d\\ue000":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"q")
    s["seed_bad_surrogate_then_ascii"] = raw(
        '{"a\\ud83d\\u0041":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"q")
    s["seed_bad_low_surrogate_first"] = raw(
        '{"a\\ude00\\ud83d":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"q")
    s["seed_edge_empty_at_end"] = raw(
        '{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},'
        '"z":{"dtype":"U8","shape":[0],"data_offsets":[2,2]}}', b"ab")
    s["seed_edge_empty_in_middle"] = raw(
        '{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},'
        '"z":{"dtype":"U8","shape":[0],"data_offsets":[1,1]}}', b"ab")
    s["seed_edge_rank_65"] = build([("deeper", "U8", [1] * 65)])
    s["seed_edge_shape_zero_nelem_no_data"] = raw(
        '{"a":{"dtype":"F4","shape":[0,3],"data_offsets":[0,0]}}')
    # ---- refused: near misses -------------------------------------------
    s["seed_bad_duplicate_tensor"] = raw(
        '{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        '"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"ab")
    s["seed_bad_duplicate_field"] = raw(
        '{"w":{"dtype":"U8","dtype":"I8","shape":[2],"data_offsets":[0,2]}}', b"ab")
    s["seed_bad_duplicate_metadata"] = raw(
        '{"__metadata__":{"a":"1"},"__metadata__":{"a":"2"},' + ok1[1:], b"ab")
    s["seed_bad_duplicate_metadata_key"] = raw('{"__metadata__":{"a":"1","a":"2"},' + ok1[1:], b"ab")
    s["seed_bad_overlap"] = raw(
        '{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},'
        '"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}', b"abc")
    s["seed_bad_hole"] = raw(
        '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        '"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}', b"abc")
    s["seed_bad_reversed"] = raw('{"w":{"dtype":"U8","shape":[0],"data_offsets":[2,0]}}', b"ab")
    s["seed_bad_out_of_bounds"] = raw(ok1, b"a")
    s["seed_bad_trailing_bytes"] = raw(ok1, b"abc")
    s["seed_bad_not_from_zero"] = raw('{"w":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}', b"abc")
    s["seed_bad_dtype_lowercase"] = raw('{"w":{"dtype":"bf16","shape":[1],"data_offsets":[0,2]}}', b"ab")
    s["seed_bad_dtype_e4m3fn"] = raw('{"w":{"dtype":"F8_E4M3FN","shape":[2],"data_offsets":[0,2]}}', b"ab")
    s["seed_bad_dtype_not_string"] = raw('{"w":{"dtype":8,"shape":[2],"data_offsets":[0,2]}}', b"ab")
    s["seed_bad_size_mismatch"] = raw('{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}}',
                                      pattern(12))
    s["seed_bad_f4_odd"] = raw('{"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}', b"ab")
    s["seed_bad_f4_odd_floor"] = raw('{"w":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}}', b"a")
    s["seed_bad_f6_floor"] = raw('{"w":{"dtype":"F6_E3M2","shape":[2],"data_offsets":[0,1]}}', b"a")
    s["seed_bad_f6_partial"] = raw('{"w":{"dtype":"F6_E2M3","shape":[2],"data_offsets":[0,2]}}', b"ab")
    s["seed_bad_shape_overflow"] = raw(
        '{"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}}')
    s["seed_bad_shape_2_64"] = raw('{"w":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,0]}}')
    s["seed_bad_bytes_overflow"] = raw(
        '{"w":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}}')
    s["seed_bad_offset_2_64"] = raw(
        '{"w":{"dtype":"U8","shape":[2],"data_offsets":[18446744073709551615,1]}}', b"ab")
    s["seed_bad_negative_dim"] = raw('{"w":{"dtype":"U8","shape":[-2],"data_offsets":[0,2]}}', b"ab")
    s["seed_bad_float_dim"] = raw('{"w":{"dtype":"U8","shape":[2.0],"data_offsets":[0,2]}}', b"ab")
    s["seed_bad_exponent_dim"] = raw('{"w":{"dtype":"U8","shape":[2e0],"data_offsets":[0,2]}}', b"ab")
    s["seed_bad_leading_zero"] = raw('{"w":{"dtype":"U8","shape":[02],"data_offsets":[0,2]}}', b"ab")
    s["seed_bad_missing_offsets"] = raw('{"w":{"dtype":"U8","shape":[2]}}', b"ab")
    s["seed_bad_missing_dtype"] = raw('{"w":{"shape":[2],"data_offsets":[0,2]}}', b"ab")
    s["seed_bad_three_offsets"] = raw('{"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2,2]}}', b"ab")
    s["seed_bad_shape_not_array"] = raw('{"w":{"dtype":"U8","shape":2,"data_offsets":[0,2]}}', b"ab")
    s["seed_bad_tensor_not_object"] = raw('{"w":[1,2]}')
    s["seed_bad_metadata_number"] = raw('{"__metadata__":{"a":1},' + ok1[1:], b"ab")
    s["seed_bad_metadata_nested"] = raw('{"__metadata__":{"a":{"b":"c"}},' + ok1[1:], b"ab")
    s["seed_bad_metadata_array"] = raw('{"__metadata__":["a"],' + ok1[1:], b"ab")
    s["seed_bad_metadata_tensor"] = raw('{"__metadata__":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"ab")
    s["seed_bad_not_object"] = raw('[]')
    s["seed_bad_trailing_comma"] = raw('{"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2],}}', b"ab")
    s["seed_bad_missing_colon"] = raw('{"w" {"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"ab")
    s["seed_bad_single_quotes"] = raw("{'w':{'dtype':'U8','shape':[2],'data_offsets':[0,2]}}", b"ab")
    s["seed_bad_unterminated"] = file_bytes('{"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}', b"ab", 0)
    s["seed_bad_control_in_string"] = raw('{"a\nb":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"ab")
    s["seed_bad_escape_x"] = raw('{"a\\x41":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"ab")
    s["seed_bad_escape_short_u"] = raw('{"a\\u12":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"ab")
    s["seed_bad_garbage_after"] = raw(ok1 + "x", b"ab")
    s["seed_bad_two_objects"] = raw(ok1 + "{}", b"ab")
    s["seed_bad_nul_after_object"] = file_bytes(ok1.encode() + b"\0   ", b"ab", 0)
    s["seed_bad_invalid_utf8"] = file_bytes(b'{"a\xff":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"ab")
    s["seed_bad_overlong_utf8"] = file_bytes(b'{"a\xc0\x80":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"ab")
    s["seed_bad_raw_surrogate"] = file_bytes(b'{"a\xed\xa0\x80":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"ab")
    s["seed_bad_truncated_utf8"] = file_bytes(b'{"a\xe6\x97":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"ab")
    for tag, num in (("dot", "1."), ("exp", "1e"), ("exp_sign", "1e+"), ("minus", "-"),
                     ("plus", "+1"), ("lead0", "01"), ("leaddot", ".5"), ("hex", "0x10"),
                     ("nan", "NaN"), ("literal", "nul"), ("literal_case", "True")):
        s["seed_bad_json_%s" % tag] = raw(
            '{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":[' + num + ']}}', b"q")
    s["seed_bad_header_past_end"] = struct.pack("<Q", 1000) + ok1.encode()
    s["seed_bad_header_over_cap"] = struct.pack("<Q", 100000001) + b"{}" + b" " * 6
    s["seed_bad_header_len_max"] = struct.pack("<Q", 2 ** 64 - 1) + b"{}      "
    s["seed_bad_short_file"] = b"\x02\x00\x00\x00"
    s["seed_bad_header_len_zero"] = struct.pack("<Q", 0)
    s["seed_bad_header_empty_spaces"] = file_bytes("        ", align=0)
    s["seed_bad_deep_arrays"] = raw("[" * 5000 + "]" * 5000)
    return s


def main(argv):
    os.makedirs(OUT, exist_ok=True)
    shared = []
    i = 1
    while i < len(argv):
        if argv[i] == "--shared" and i + 1 < len(argv):
            shared.append(argv[i + 1])
            i += 2
        else:
            sys.stderr.write(__doc__)
            return 2
    n = 0
    for name, data in sorted(seeds().items()):
        with open(os.path.join(OUT, name + ".safetensors"), "wb") as f:
            f.write(data)
        n += 1
    copied = 0
    for d in shared:
        for name in sorted(os.listdir(d)):
            p = os.path.join(d, name)
            if os.path.isfile(p) and os.path.getsize(p) < 20000:
                shutil.copyfile(p, os.path.join(OUT, name))
                copied += 1
    print("make_seeds: %d hand-made seeds, %d copied, in %s" % (n, copied, OUT))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
