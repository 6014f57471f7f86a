{{comment}}__kernel __attribute__((reqd_work_group_size({{gx}}, {{gy}}, 1)))
void {{name}}({{params}}) {
  // [{{m}} x {{k}}] x [{{k}} x {{n}}], {{batches}} batch(es); block {{bm}} x {{bn}}, {{py}} x {{px}} outputs per work-item, k step {{tk}}{{notes}}
  const int lx = get_local_id(0), ly = get_local_id(1);
  const int lid = ly * {{gx}} + lx;
  const {{ix}} row0 = ({{ix}})get_group_id(1) * {{bm}}, col0 = ({{ix}})get_group_id(0) * {{bn}};
  const {{ix}} bz = get_global_id(2);
{{batch_decl}}{{tiles}}  float acc[{{py}}][{{px}}];
  for (int i = 0; i < {{py}}; ++i)
    for (int j = 0; j < {{px}}; ++j) acc[i][j] = 0.0f;
{{first_loads}}  for ({{ix}} k0 = 0; k0 < {{k}}; k0 += {{tk}}) {
{{stage}}    barrier(CLK_LOCAL_MEM_FENCE);
{{next_loads}}    #pragma unroll
    for (int q = 0; q < {{tk}}; ++q) {
      float a[{{py}}], b[{{px}}];
{{reads}}      for (int i = 0; i < {{py}}; ++i)
        for (int j = 0; j < {{px}}; ++j) acc[i][j] += a[i] * b[j];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (int i = 0; i < {{py}}; ++i) {
    const {{ix}} row = row0 + {{row_at}};
    if (row >= {{m}}) break;
{{store}}  }
}
