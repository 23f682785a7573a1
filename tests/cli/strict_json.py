"""JSON as the CLI tests read it: a key twice in one object is an error
(json's default keeps the last one silently)."""
import json


def unique_keys(pairs):
    seen = set()
    for key, _ in pairs:
        if key in seen:
            raise ValueError("key %r twice in one object" % key)
        seen.add(key)
    return dict(pairs)


def load(path):
    with open(path) as f:
        return json.load(f, object_pairs_hook=unique_keys)


def loads(text):
    return json.loads(text, object_pairs_hook=unique_keys)
