{{comment}}__kernel __attribute__((reqd_work_group_size({{lanes}}, {{gy}}, 1)))
void {{name}}({{params}}) {
  // skinny [{{w}} x {{k}}] x [{{k}} x {{j}}] ({{wide}} wide, {{narrow}} narrow), {{batches}} batch(es): {{lanes}} work-items along k share {{rb}} {{wide}}(s), {{gy}} such per group{{notes}}
  const int lx = get_local_id(0), ly = get_local_id(1);
  const {{ix}} w0 = ({{ix}})get_group_id(1) * {{bw}} + ly * {{rb}};
  const {{ix}} bz = get_global_id(2);
{{batch_decl}}  __local float red[{{gy}}][{{outs}}][{{lanes}} + 1];
  float part[{{rb}}][{{j}}];
  for (int r = 0; r < {{rb}}; ++r)
    for (int j = 0; j < {{j}}; ++j) part[r][j] = 0.0f;
  #pragma unroll 4
  for (int t = 0; t < {{trips}}; ++t) {
    const {{ix}} k0 = ({{ix}})(lx * {{v}}) + ({{ix}})t * {{step}};
{{tail}}{{accumulate}}  }
  // Each lane's partial sums into local memory; then lane o adds output o's {{lanes}} partials
  // in lane order (a fixed order: the same bits every run).
  for (int r = 0; r < {{rb}}; ++r)
    for (int j = 0; j < {{j}}; ++j) red[ly][r * {{j}} + j][lx] = part[r][j];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int o = lx; o < {{outs}}; o += {{lanes}}) {
    const {{ix}} {{wide}} = w0 + o / {{j}}, {{narrow}} = o % {{j}};
    if ({{wide}} >= {{w}}) break;
    float acc = 0.0f;
    for (int l = 0; l < {{lanes}}; ++l) acc += red[ly][o][l];
    {{store}}
  }
}
