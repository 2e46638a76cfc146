package onnx

import (
	"encoding/binary"
	"math"
	"unsafe"

	"google.golang.org/protobuf/proto"

	pb "github.com/softsync/softsync/learner/nn/onnx/internal/onnxpb"
)

// Attribute constructors. ONNX's schema is proto2: every scalar field is
// a pointer.

func attrInt(name string, v int) *pb.AttributeProto {
	return &pb.AttributeProto{Name: proto.String(name), Type: pb.AttributeProto_INT.Enum(), I: proto.Int64(int64(v))}
}

func attrInts(name string, v ...int) *pb.AttributeProto {
	return &pb.AttributeProto{Name: proto.String(name), Type: pb.AttributeProto_INTS.Enum(), Ints: int64s(v)}
}

func attrFloat(name string, v float32) *pb.AttributeProto {
	return &pb.AttributeProto{Name: proto.String(name), Type: pb.AttributeProto_FLOAT.Enum(), F: proto.Float32(v)}
}

func int64s(v []int) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = int64(x)
	}
	return out
}

// floatTensor is a float32 tensor of the given dimensions, its values
// little-endian in raw_data (row-major, as ONNX stores them). On a
// little-endian machine raw_data is v's memory itself, not a copy: the
// model is marshalled while v is the caller's, and a network of 244 MB
// is not held twice.
func floatTensor(name string, dims []int, v []float32) *pb.TensorProto {
	return &pb.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(pb.TensorProto_FLOAT)),
		Dims: int64s(dims), RawData: littleEndian(v)}
}

// littleEndian returns v's values as little-endian bytes.
func littleEndian(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	if nativeLittle {
		return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
	}
	raw := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	return raw
}

// nativeLittle reports whether this machine stores numbers little-endian.
var nativeLittle = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// int64Tensor is a one-dimensional int64 tensor (the pads of Pad, the axes
// of Unsqueeze).
func int64Tensor(name string, v []int) *pb.TensorProto {
	return &pb.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(pb.TensorProto_INT64)),
		Dims: []int64{int64(len(v))}, Int64Data: int64s(v)}
}

// floatValue describes a graph input or output: a float32 tensor whose
// first dimension is the batch (symbolic, batchDim) and whose others are
// dims.
func floatValue(name string, dims ...int) *pb.ValueInfoProto {
	shape := &pb.TensorShapeProto{Dim: []*pb.TensorShapeProto_Dimension{
		{Value: &pb.TensorShapeProto_Dimension_DimParam{DimParam: batchDim}},
	}}
	for _, d := range dims {
		shape.Dim = append(shape.Dim, &pb.TensorShapeProto_Dimension{Value: &pb.TensorShapeProto_Dimension_DimValue{DimValue: int64(d)}})
	}
	return &pb.ValueInfoProto{Name: proto.String(name), Type: &pb.TypeProto{Value: &pb.TypeProto_TensorType{
		TensorType: &pb.TypeProto_Tensor{ElemType: proto.Int32(int32(pb.TensorProto_FLOAT)), Shape: shape},
	}}}
}
