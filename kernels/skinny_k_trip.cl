  for (int t = 0; t < {{trips}}; ++t) {
    const {{ix}} kb = {{kbase}}({{ix}})t * {{step}};
    // The group stages the trip's {{step}} x {{j}} narrow values (neighbouring work-items read
    // neighbouring {{stage_order}}), zero past the reduction.
    if (t > 0) barrier(CLK_LOCAL_MEM_FENCE);
    for (int q = lid; q < {{step}} * {{j}}; q += {{group}}) {
      const int kq = {{kq}}, j = {{jq}};
      const {{ix}} kk = kb + kq, {{narrow}} = j;
      nvs[kq % {{v}}][kq / {{v}}][j] = kk < {{kend}} ? {{narrow_at}} : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const {{ix}} k0 = kb + lx * {{v}};
{{tail}}{{accumulate}}{{tail_end}}  }
