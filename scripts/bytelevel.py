"""GPT-2's byte-level BPE alphabet, shared by the fixture and comparison scripts."""


def byte_decoder():
    """the vocab's unicode characters -> the raw bytes they stand for"""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}
