{{comment}}__kernel __attribute__((reqd_work_group_size({{lanes}}, {{gy}}, 1)))
void {{name}}({{params}}) {
  // skinny [{{w}} x {{k}}] x [{{k}} x {{j}}] ({{wide}} wide, {{narrow}} narrow), {{batches}} batch(es): {{lanes}} work-items along k share {{rb}} {{wide}}(s), {{gy}} such per group{{notes}}
  const int lx = get_local_id(0), ly = get_local_id(1);
  const int lid = ly * {{lanes}} + lx;
  const {{ix}} w0 = ({{ix}})get_group_id(1) * {{bw}} + ly * {{rb}};
{{bz_decl}}{{batch_decl}}  __local float red[{{gy}}][{{outs}}][{{lanes}} + 1];
  // The narrow operand's values of one trip: value c of lane l at nvs[c][l][j] (lanes one
  // row of j + 1 apart: distinct banks).
  __local float nvs[{{v}}][{{lanes}}][{{j}} + 1];
{{split_decl}}{{prologue}}  float part[{{rb}}][{{j}}];
  for (int r = 0; r < {{rb}}; ++r)
    for (int j = 0; j < {{j}}; ++j) part[r][j] = 0.0f;
{{trip_loop}}  // Each lane's partial sums into local memory; then lane o adds output o's {{lanes}} partials
  // in lane order (a fixed order: the same bits every run).
  for (int r = 0; r < {{rb}}; ++r)
    for (int j = 0; j < {{j}}; ++j) red[ly][r * {{j}} + j][lx] = part[r][j];
  barrier(CLK_LOCAL_MEM_FENCE);
{{finish}}}
