// The behavioural CRC network of trainingcxl.hdl.checkpoint.crc.CrcNetwork:
// the CRC-32C register after WIDTH bits of data (most significant byte first)
// from state, without initial value or final XOR.
//
// Bit k of crc is the parity of {data, state} under mask k of MASKS (32 masks
// of 32 + WIDTH bits, computed by the Python). With TCXL_DPI defined
// (Verilator builds of the test benches) a C function computes the same CRC a
// byte at a time, and only when its inputs change (sim/dpi/crc32c.cpp): far
// cheaper per cycle than the masks.
module tcxl_crc #(
    parameter WIDTH = 512,
    parameter [32*(32+WIDTH)-1:0] MASKS = 0
) (
    input [31:0] state,
    input [WIDTH-1:0] data,
    output [31:0] crc
);
`ifdef TCXL_DPI
    import "DPI-C" function int tcxl_crc_open();
    import "DPI-C" pure function int tcxl_crc32c(input int handle, input int state,
                                                 input bit [511:0] data, input int bytes);
    int handle;
    initial handle = tcxl_crc_open();
    assign crc = tcxl_crc32c(handle, state, 512'(data), WIDTH / 8);
`else
    genvar k;
    for (k = 0; k < 32; k = k + 1) begin : bit_
        assign crc[k] = ^({data, state} & MASKS[k*(32+WIDTH) +: 32+WIDTH]);
    end
`endif
endmodule
