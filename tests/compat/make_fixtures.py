#!/usr/bin/env python3
"""Writes the fixtures of `fbc gen --from-hf` (tests/compat/<arch>/): a random-weight Hugging Face
model built from a small config of each decoder architecture, saved with `save_pretrained`
(config.json + model.safetensors, the checkpoint's own names and [out, in] Linear weights), and
`inputs.safetensors`: the inputs fbc's graph takes besides the checkpoint (tokens, the additive
causal mask, the RoPE tables from the model's own rotary embedding), and `outputs.safetensors`:
the logits transformers computes for them (float32, eager attention).

    pip install torch transformers safetensors && python3 tests/compat/make_fixtures.py OUTDIR
    (OUTDIR encoders: only BERT, ViT and the Whisper decoder)

Run on the lent device (it has torch and transformers; transformers 5.17.0 and torch 2.11 made the
committed files); copy OUTDIR/<arch> into tests/compat/.
"""
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file

S, B = 8, 1
CONFIGS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, vocab_size=96, max_position_embeddings=256,
        rms_norm_eps=1e-5, tie_word_embeddings=True,
        rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=32.0,
                             low_freq_factor=1.0, high_freq_factor=4.0,
                             original_max_position_embeddings=64))),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=96, max_position_embeddings=256, rms_norm_eps=1e-6,
        tie_word_embeddings=False, rope_parameters=dict(rope_type="default", rope_theta=1000000.0))),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, vocab_size=96, max_position_embeddings=256,
        rms_norm_eps=1e-6, query_pre_attn_scalar=16, attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0, sliding_window=4096, hidden_activation="gelu_pytorch_tanh",
        tie_word_embeddings=True, rope_parameters=dict(rope_type="default", rope_theta=10000.0))),
}


def perturb_and_save(model, keys, d):
    """Moves the parameters whose name holds one of `keys` (norms, embeddings) away from their
    init (1 or 0), so that the checkpoint's values are really read, then saves the model to `d`."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            if any(k in n for k in keys):
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(d, safe_serialization=True)


def main(out):
    for arch, (cfg_name, model_name, kw) in CONFIGS.items():
        torch.manual_seed(0)
        cfg = getattr(transformers, cfg_name)(**kw)
        cfg._attn_implementation = "eager"
        model = getattr(transformers, model_name)(cfg).float().eval()
        d = os.path.join(out, arch)
        perturb_and_save(model, ["norm"], d)
        tokens = torch.randint(0, cfg.vocab_size, (B, S))
        pos = torch.arange(S).unsqueeze(0)
        with torch.no_grad():
            logits = model(input_ids=tokens).logits
            emb = model.model.embed_tokens(tokens)
            cos, sin = model.model.rotary_emb(emb, pos)
        mask = torch.triu(torch.full((S, S), float("-inf")), diagonal=1)
        save_file({
            "tokens": tokens.to(torch.int32).contiguous(),
            "mask": mask.contiguous(),
            "rope_cos": cos[0].float().contiguous(),
            "rope_sin": sin[0].float().contiguous(),
        }, os.path.join(d, "inputs.safetensors"))
        save_file({"logits": logits.float().contiguous()}, os.path.join(d, "outputs.safetensors"))
        os.remove(os.path.join(d, "generation_config.json"))
        print(arch, transformers.__version__, torch.__version__, logits.shape,
              float(logits.abs().max()), sorted(os.listdir(d)))
        print(json.dumps({k: v for k, v in json.load(open(os.path.join(d, "config.json"))).items()
                          if k not in ("transformers_version",)}))


def encoders(out):
    """BERT (BertModel: last hidden state and pooler output, with padding in the attention
    mask) and ViT (ViTModel without its pooler: last hidden state), fed what fbc's graphs take:
    BERT's additive mask [B, 1, 1, S], ViT's image as patches [B, N, C·P·P] in (channel, row,
    column) order, the order of the patch convolution's weight."""
    B = 2
    torch.manual_seed(0)
    cfg = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128, vocab_size=100,
                                  max_position_embeddings=32, type_vocab_size=2,
                                  hidden_act="gelu", layer_norm_eps=1e-12)
    cfg._attn_implementation = "eager"
    model = transformers.BertModel(cfg).float().eval()
    d = os.path.join(out, "bert")
    perturb_and_save(model, ["LayerNorm"], d)
    tokens = torch.randint(0, cfg.vocab_size, (B, S))
    types = torch.randint(0, 2, (B, S))
    attn = torch.ones(B, S, dtype=torch.long)
    attn[1, -2:] = 0
    with torch.no_grad():
        o = model(input_ids=tokens, token_type_ids=types, attention_mask=attn)
    additive = (1.0 - attn[:, None, None, :].float()) * torch.finfo(torch.float32).min
    save_file({"tokens": tokens.to(torch.int32).contiguous(),
               "token_types": types.to(torch.int32).contiguous(),
               "attn_mask": additive.contiguous()}, os.path.join(d, "inputs.safetensors"))
    save_file({"last_hidden_state": o.last_hidden_state.contiguous(),
               "pooler_output": o.pooler_output.contiguous()}, os.path.join(d, "outputs.safetensors"))
    print("bert", sorted(os.listdir(d)), float(o.last_hidden_state.abs().max()))

    torch.manual_seed(0)
    cfg = transformers.ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                 intermediate_size=128, image_size=32, patch_size=8,
                                 num_channels=3, hidden_act="gelu", layer_norm_eps=1e-12)
    cfg._attn_implementation = "eager"
    model = transformers.ViTModel(cfg, add_pooling_layer=False).float().eval()
    d = os.path.join(out, "vit")
    perturb_and_save(model, ["layernorm", "cls_token", "position"], d)
    pixels = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        o = model(pixel_values=pixels)
    p = 8
    patches = pixels.unfold(2, p, p).unfold(3, p, p)          # [1, 3, 4, 4, 8, 8]
    patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(1, 16, 3 * p * p)
    save_file({"patches": patches.contiguous()}, os.path.join(d, "inputs.safetensors"))
    save_file({"last_hidden_state": o.last_hidden_state.contiguous()},
              os.path.join(d, "outputs.safetensors"))
    print("vit", sorted(os.listdir(d)), float(o.last_hidden_state.abs().max()))
    # Whisper: the whole checkpoint (encoder included; fbc's graph is the decoder, so `fbc run`
    # takes it with --allow-unused-inputs), the decoder fed random encoder states.
    torch.manual_seed(0)
    cfg = transformers.WhisperConfig(d_model=64, decoder_layers=2, decoder_attention_heads=4,
                                     decoder_ffn_dim=128, encoder_layers=1,
                                     encoder_attention_heads=4, encoder_ffn_dim=128,
                                     vocab_size=100, max_target_positions=32,
                                     max_source_positions=16, num_mel_bins=16, pad_token_id=1,
                                     bos_token_id=0, eos_token_id=2, decoder_start_token_id=0)
    cfg._attn_implementation = "eager"
    model = transformers.WhisperForConditionalGeneration(cfg).float().eval()
    d = os.path.join(out, "whisper")
    perturb_and_save(model, ["layer_norm"], d)
    tokens = torch.randint(0, cfg.vocab_size, (1, S))
    enc = torch.randn(1, 16, 64)
    with torch.no_grad():
        h = model.model.decoder(input_ids=tokens, encoder_hidden_states=enc).last_hidden_state
        logits = model.proj_out(h)
    mask = torch.triu(torch.full((S, S), float("-inf")), diagonal=1)
    save_file({"tokens": tokens.to(torch.int32).contiguous(), "mask": mask.contiguous(),
               "encoder_states": enc.contiguous()}, os.path.join(d, "inputs.safetensors"))
    save_file({"logits": logits.contiguous()}, os.path.join(d, "outputs.safetensors"))
    print("whisper", sorted(os.listdir(d)), float(logits.abs().max()))
    for a in ("bert", "vit", "whisper"):
        g = os.path.join(out, a, "generation_config.json")
        if os.path.exists(g):
            os.remove(g)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[2] == "encoders":
        encoders(sys.argv[1])
    else:
        main(sys.argv[1])
        encoders(sys.argv[1])
