/**
 * Hugging Face's tensor names of the Llama-style decoders (LlamaForCausalLM,
 * MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM): our parameter
 * names (gptParamSpecs) -> theirs, biases and Qwen3's per-head q/k norms
 * included. nn.Linear stores its matrices [out, in], ours are [in, out].
 */
import { ModelError } from "../errors.js";
import type { GptConfig } from "../gpt-config.js";
import type { CheckpointTensor } from "./family.js";

const LAYER = /^blocks\.(\d+)\.(.+)$/;
const LAYER_TENSORS: Record<string, string> = {
  "norm1.gamma": "input_layernorm.weight",
  "attn.q.w": "self_attn.q_proj.weight",
  "attn.q.b": "self_attn.q_proj.bias",
  "attn.k.w": "self_attn.k_proj.weight",
  "attn.k.b": "self_attn.k_proj.bias",
  "attn.v.w": "self_attn.v_proj.weight",
  "attn.v.b": "self_attn.v_proj.bias",
  "attn.q_norm.gamma": "self_attn.q_norm.weight",
  "attn.k_norm.gamma": "self_attn.k_norm.weight",
  "attn.o.w": "self_attn.o_proj.weight",
  "attn.o.b": "self_attn.o_proj.bias",
  "norm2.gamma": "post_attention_layernorm.weight",
  "mlp.gate.w": "mlp.gate_proj.weight",
  "mlp.gate.b": "mlp.gate_proj.bias",
  "mlp.up.w": "mlp.up_proj.weight",
  "mlp.up.b": "mlp.up_proj.bias",
  "mlp.down.w": "mlp.down_proj.weight",
  "mlp.down.b": "mlp.down_proj.bias",
};

/** The checkpoint tensor of `parameter` in a Llama-style decoder of family `family` (named in the error for a parameter it lacks). */
export function decoderTensorOf(family: string, parameter: string, config: GptConfig): CheckpointTensor {
  if (parameter === "embed.weight") return { name: "model.embed_tokens.weight", transposed: false };
  if (parameter === "norm.gamma") return { name: "model.norm.weight", transposed: false };
  if (parameter === "head.w" && !config.tiedHead) return { name: "lm_head.weight", transposed: true };
  const layer = LAYER.exec(parameter);
  const tensor = layer === null ? undefined : LAYER_TENSORS[layer[2]!];
  if (layer === null || tensor === undefined) throw new ModelError(`the ${family} family has no tensor for parameter '${parameter}'`);
  return { name: `model.layers.${layer[1]}.${tensor}`, transposed: layer[2]!.endsWith(".w") };
}
