"""`PagedPrefix`: a batch's prefix K/V gathered from the pool's pages, once per `PagedPrefix`
(the Euler steps of a batch run back to back over one), padding masked."""

from __future__ import annotations

import torch

from vla_server.mem_cache.kv_pool import ReqToTokenPool, TokenToKVPool
from vla_server.model.paged_prefix import PagedPrefix


class CountingPool(TokenToKVPool):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.reads = 0

    def get_kv(self, layer_id: int):
        self.reads += 1
        return super().get_kv(layer_id)


def test_each_layer_is_gathered_once_per_prefix_in_row_order_with_padding_masked():
    pool = CountingPool(16, 2, 1, 4, torch.float32)
    rows = ReqToTokenPool(2, 8)
    layout = {0: [5, 2, 9], 1: [7, 1]}  # request row -> its prefix's slots, scattered
    for row, slots in layout.items():
        loc = torch.tensor(slots)
        rows.req_to_token[row, : len(slots)] = loc.to(torch.int32)
        for layer in range(2):
            values = (10 * layer + loc.float())[:, None, None].expand(-1, 1, 4)
            pool.set_kv(layer, loc, values, -values)
    prefix = PagedPrefix.build(rows, pool, [1, 0], [2, 3])
    assert prefix.valid.tolist() == [[True, True, False], [True, True, True]]
    keys, values = prefix.kv(1)
    assert keys[:, :, 0, 0].tolist() == [[17.0, 11.0, 0.0], [15.0, 12.0, 19.0]]  # pad: slot 0
    torch.testing.assert_close(values, -keys)
    assert prefix.kv(1)[0] is keys and pool.reads == 1  # the second read is the first's
    prefix.kv(0)
    assert pool.reads == 2
    built = []
    mask = prefix.memo("mask", lambda: built.append(1) or torch.ones(1))
    assert prefix.memo("mask", lambda: built.append(1)) is mask and built == [1]
