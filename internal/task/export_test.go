package task

// CarryBudget is carryBudget, for the external tests.
const CarryBudget = carryBudget
