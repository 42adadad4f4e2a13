// The external RAM of trainingcxl.hdl.common.ram.Ram: its size is a parameter,
// so the netlist does not grow with its depth. Contents start at zero.
//
// READS read ports; bit k of COMB makes port k combinational, otherwise it is
// synchronous (data the cycle after the address, the old word when the write
// port writes the same word in that cycle). One write port, GRAN bits per
// enable bit.
//
// With BACKDOOR set and TCXL_DPI defined (Verilator builds of the test
// benches), the words live in a file the simulator maps, named by the
// environment variable TRAININGCXL_RAM_<NAME> (sim/dpi/ram_backdoor.cpp), so a
// bench reads and writes them directly; otherwise in a Verilog array.
module tcxl_ram #(
    parameter WIDTH = 8,
    parameter DEPTH = 16,
    parameter ABITS = 4,
    parameter GRAN = 8,
    parameter READS = 1,
    parameter COMB = 0,
    parameter BACKDOOR = 0,
    parameter NAME = ""
) (
    input clk,
    input [READS*ABITS-1:0] rd_addr,
    input [READS-1:0] rd_en,
    output [READS*WIDTH-1:0] rd_data,
    input [ABITS-1:0] wr_addr,
    input [WIDTH/GRAN-1:0] wr_en,
    input [WIDTH-1:0] wr_data
);
    localparam LANES = WIDTH / GRAN;
    reg [READS*WIDTH-1:0] rd_q;
    integer i, g;

`ifdef TCXL_DPI
    localparam USE_DPI = BACKDOOR;
`else
    localparam USE_DPI = 0;
`endif
    generate if (USE_DPI != 0) begin : dpi
`ifdef TCXL_DPI
        // Fixed 512-bit words keep one C signature for every width.
        import "DPI-C" function int tcxl_ram_open(input string name, input longint depth,
                                                  input int bytes);
        import "DPI-C" function void tcxl_ram_read(input int handle, input longint addr,
                                                   output bit [511:0] data);
        import "DPI-C" function void tcxl_ram_write(input int handle, input longint addr,
                                                    input bit [511:0] data, input bit [511:0] mask);
        int handle;
        longint at;
        bit [511:0] word, mask;
        initial begin
            rd_q = 0;
            handle = tcxl_ram_open(NAME, 64'(DEPTH), (WIDTH + 7) / 8);
        end
        always @(posedge clk) begin
            // Reads first: a word written in the same cycle reads old.
            for (i = 0; i < READS; i = i + 1)
                if (rd_en[i]) begin
                    at = 0;
                    at[ABITS-1:0] = rd_addr[i*ABITS +: ABITS];
                    tcxl_ram_read(handle, at, word);
                    rd_q[i*WIDTH +: WIDTH] <= word[WIDTH-1:0];
                end
            if (|wr_en) begin
                mask = 0;
                for (g = 0; g < LANES; g = g + 1)
                    if (wr_en[g]) mask[g*GRAN +: GRAN] = {GRAN{1'b1}};
                word = 0;
                word[WIDTH-1:0] = wr_data;
                at = 0;
                at[ABITS-1:0] = wr_addr;
                tcxl_ram_write(handle, at, word, mask);
            end
        end
        assign rd_data = rd_q;
`endif
    end else begin : array
        reg [WIDTH-1:0] mem [0:DEPTH-1];
        integer k;
        initial begin
            for (k = 0; k < DEPTH; k = k + 1) mem[k] = 0;
            rd_q = 0;
        end
        always @(posedge clk)
            for (g = 0; g < LANES; g = g + 1)
                if (wr_en[g]) mem[wr_addr][g*GRAN +: GRAN] <= wr_data[g*GRAN +: GRAN];
        always @(posedge clk)
            for (i = 0; i < READS; i = i + 1)
                if (rd_en[i] && !COMB[i]) rd_q[i*WIDTH +: WIDTH] <= mem[rd_addr[i*ABITS +: ABITS]];
        genvar r;
        for (r = 0; r < READS; r = r + 1) begin : port
            assign rd_data[r*WIDTH +: WIDTH] = COMB[r] ? mem[rd_addr[r*ABITS +: ABITS]]
                                                      : rd_q[r*WIDTH +: WIDTH];
        end
    end endgenerate
endmodule
