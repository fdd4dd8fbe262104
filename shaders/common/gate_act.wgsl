// gate_act: the activation of a gated MLP's gate, h = gate_act(g) * u, pulled in with
// `//#include gate_act` by elementwise.wgsl (SILU_MUL) and matmul_common.wgsl (the GATED epilogue), so the
// fused and the unfused paths give the same bits; not a kernel of its own. Needs the flag GELU.
//
// In f32, both forms g * sigmoid(a) = g / (1 + exp(-a)):
//   SiLU (GELU unset): a = g.
//   GELU: gelu_tanh(g) = 0.5 g (1 + tanh(z)), z = sqrt(2 / pi) (g + 0.044715 g^3) (PyTorch's
//     gelu(approximate='tanh'), HF's gelu_pytorch_tanh), through 0.5 (1 + tanh(z)) = sigmoid(2z):
//     a = 2z. This form needs no tanh (NaN past |z| ~ 44 on some drivers) and does not cancel as
//     1 + tanh(z) does for negative g (f32 relative error at g = -4: 6e-7, against 5e-4 through
//     tanh). a is clamped at -80 so that exp stays finite (e^80 ~ 5.5e34: the result is then g *
//     2e-35, where the true one is smaller still); a grows as g^3 and passes exp's range (-88) at
//     g ~ -10, a gate a model reaches.

fn gate_act(g: f32) -> f32 {
//#if GELU
  let a = max(1.5957691216 * fma(0.044715 * g * g, g, g), -80.0);
//#else
  let a = g;
//#endif
  return g / (1.0 + exp(-a));
}
