{{head}}  // skinny [{{w}} x {{k}}] x [{{k}} x {{j}}] ({{wide}} wide, {{narrow}} narrow), {{batches}} batch(es): {{lanes}} work-items along {{wide}} ({{v}} each), {{gy}} along k per group{{notes}}
  const int lx = get_local_id(0), ly = get_local_id(1);
  const {{ix}} w0 = ({{ix}}){{block_id}} * {{bw}};
{{bz_decl}}{{batch_decl}}{{red_decl}}{{split_decl}}{{prologue}}  float part[{{v}}][{{j}}];
  for (int c = 0; c < {{v}}; ++c)
    for (int j = 0; j < {{j}}; ++j) part[c][j] = 0.0f;
  const {{ix}} wl = w0 + lx * {{v}};
  if (wl < {{w}}) {
    #pragma unroll 4
    for (int t = 0; t < {{trips}}; ++t) {
      const {{ix}} kk = {{kbase}}({{ix}})ly + ({{ix}})t * {{step}};
{{tail}}{{accumulate}}    }
  }
  // Each work-item's partial sums into local memory; then the group adds each output's {{gy}}
  // partials in order along k (a fixed order: the same bits every run).
  for (int c = 0; c < {{v}}; ++c)
    for (int j = 0; j < {{j}}; ++j) red[j][ly][lx * {{v}} + c] = part[c][j];
  barrier(CLK_LOCAL_MEM_FENCE);
{{finish}}{{end}}
