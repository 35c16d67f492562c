"""Writes the Resize models of tests/lit/errors/resize.test into DIR:
each is one Resize node that pipec must refuse with a clear message."""
import sys

import numpy as np
from onnx import TensorProto as T, helper as h, numpy_helper as nh, save

out = sys.argv[1]


def model(name, attrs, inputs, inits, opset=13, dtype=T.FLOAT, extra_inputs=()):
    node = h.make_node('Resize', inputs, ['y'], name='rs', **attrs)
    ins = [h.make_tensor_value_info('x', dtype, [1, 1, 2, 2])] + list(extra_inputs)
    g = h.make_graph([node], name, ins, [h.make_tensor_value_info('y', dtype, None)],
                     initializer=[nh.from_array(np.array(v), n) for n, v in inits])
    save(h.make_model(g, opset_imports=[h.make_opsetid('', opset)]), f'{out}/{name}.onnx')


scales = ('scales', np.array([1, 1, 2, 2], np.float32))
sizes = ('sizes', np.array([1, 1, 4, 4], np.int64))
model('scales-input', {}, ['x', '', 'scales'], [],
      extra_inputs=[h.make_tensor_value_info('scales', T.FLOAT, [4])])
model('sizes-input', {}, ['x', '', '', 'sizes'], [],
      extra_inputs=[h.make_tensor_value_info('sizes', T.INT64, [4])])
model('both', {}, ['x', '', 'scales', 'sizes'], [scales, sizes])
model('mode', {'mode': 'area'}, ['x', '', 'scales'], [scales])
model('coord', {'coordinate_transformation_mode': 'corners'}, ['x', '', 'scales'], [scales])
model('antialias-13', {'antialias': 1, 'mode': 'linear'}, ['x', '', 'scales'], [scales])
model('cubic-int', {'mode': 'cubic'}, ['x', '', 'scales'], [scales], dtype=T.INT64)
model('crop-no-roi', {'coordinate_transformation_mode': 'tf_crop_and_resize'},
      ['x', '', 'scales'], [scales])
model('scales-length', {}, ['x', '', 'scales'], [('scales', np.array([2, 2], np.float32))])
