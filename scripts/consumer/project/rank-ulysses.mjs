// Rank entry: UlyssesAttention around ONNX Runtime attention on this rank's
// sequence shard; returns the shard's out, dq, dk, dv.
import { UlyssesAttention } from "@ulysses/parallel";
import { OrtAttention, SessionCache } from "@ulysses/kernels";
import { randomTensor, seededRandom } from "@ulysses/kernels/testing";
import { evenSplitSizes, narrow } from "@ulysses/tensors";

export default function setup({ group, ortThreads }) {
  const cache = new SessionCache({ intraOpThreads: ortThreads });
  return {
    async run({ batch, seq, heads, kvHeads, headDim, causal, seed }) {
      const random = seededRandom(seed);
      const q = randomTensor([batch, seq, heads, headDim], random);
      const k = randomTensor([batch, seq, kvHeads, headDim], random);
      const v = randomTensor([batch, seq, kvHeads, headDim], random);
      const dOut = randomTensor([batch, seq, heads, headDim], random);
      const sizes = evenSplitSizes(seq, group.size);
      const start = sizes.slice(0, group.rank).reduce((a, b) => a + b, 0);
      // [b, N, h, D] -> [b, N/P, h, D]: this rank's tokens
      const shard = (t) => narrow(t, 1, start, sizes[group.rank]);
      const attention = new UlyssesAttention(new OrtAttention({ cache }), group);
      const { out, context } = await attention.forward(shard(q), shard(k), shard(v), { causal, seqLength: seq });
      const { dq, dk, dv } = await attention.backward(context, shard(dOut));
      const plain = (t) => ({ shape: [...t.shape], data: Float32Array.from(t.data) });
      return { out: plain(out), dq: plain(dq), dk: plain(dk), dv: plain(dv) };
    },
    async dispose() {
      await cache.release();
    },
  };
}
