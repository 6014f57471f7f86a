  for (int t0 = 0; t0 < {{trips}}; t0 += {{batch}}) {
    // The reads of {{batch}} trips, all issued before the first of their barriers: each
    // work-item's values of the wide operand and the narrow values it stages.
    {{wide_type}} wvs[{{batch}}][{{rb}}];
    float nvr[{{batch}}][{{per}}];
    for (int p = 0; p < {{batch}}; ++p) {
      const {{ix}} kb = {{kbase}}({{ix}})(t0 + p) * {{step}};
      const {{ix}} k0 = kb + lx * {{v}};
      for (int r = 0; r < {{rb}}; ++r) {
        const {{ix}} {{wide}} = w0 + r, kk = k0;
        wvs[p][r] = {{wide_read}};
      }
      for (int i = 0; i < {{per}}; ++i) {
        const int q = lid + i * {{group}};
        const int kq = {{kq}}, j = {{jq}};
        const {{ix}} kk = kb + kq, {{narrow}} = j;
        nvr[p][i] = {{q_guard}}kk < {{kend}} ? {{narrow_at}} : 0.0f;
      }
    }
    for (int p = 0; p < {{batch}}; ++p) {
      const {{ix}} kb = {{kbase}}({{ix}})(t0 + p) * {{step}};
      // The group stages the trip's {{step}} x {{j}} narrow values (neighbouring work-items
      // read neighbouring {{stage_order}}) from their registers, zero past the reduction.
      if (t0 + p > 0) barrier(CLK_LOCAL_MEM_FENCE);
      for (int i = 0; i < {{per}}; ++i) {
        const int q = lid + i * {{group}};
        const int kq = {{kq}}, j = {{jq}};
        {{q_if}}nvs[kq % {{v}}][kq / {{v}}][j] = nvr[p][i];
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      const {{ix}} k0 = kb + lx * {{v}};
{{tail}}{{accumulate}}{{tail_end}}    }
  }
